// SPDX-License-Identifier: BSD-3-Clause
// alltoall_perf: block j of rank i's input ends as block i of rank j's output.
#include "common.hpp"

namespace {

// Per rank: n blocks of count / n each way; the count column is one block.
bench::Counts counts(std::size_t count, int n) {
  const std::size_t block = count / static_cast<std::size_t>(n);
  const std::size_t total = block * static_cast<std::size_t>(n);
  return {total, total, block, 0, 0};
}

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

// Output block `from` comes from rank `from`'s input block `rank`.
std::optional<std::int64_t> expected(const bench::Pattern& p, int rank, int, bool, std::size_t i,
                                     const bench::Counts& c) {
  const std::size_t from = i / c.param;
  return bench::input_value(p, static_cast<int>(from),
                            static_cast<std::size_t>(rank) * c.param + i % c.param);
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  works.push_back(c.group.all_to_all(c.send, c.recv));
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"alltoall_perf",
                                       bench::Coll::alltoall,
                                       /*uses_op=*/false,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/true,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
