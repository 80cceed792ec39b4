// SPDX-License-Identifier: BSD-3-Clause
// all_gather_perf: every rank ends with every rank's block, in rank order.
#include "common.hpp"

namespace {

// Per rank: count / n elements in, n times that out; in place the input is block `rank`.
bench::Counts counts(std::size_t count, int n) {
  const std::size_t per_rank = count / static_cast<std::size_t>(n);
  return {per_rank, per_rank * static_cast<std::size_t>(n), per_rank, per_rank, 0};
}

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

std::optional<std::int64_t> expected(const bench::Pattern& p, int, int, bool, std::size_t i,
                                     const bench::Counts& c) {
  return bench::input_value(p, static_cast<int>(i / c.send), i % c.send);
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  works.push_back(c.group.allgather(c.send, c.recv));
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"all_gather_perf",
                                       bench::Coll::all_gather,
                                       /*uses_op=*/false,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/true,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
