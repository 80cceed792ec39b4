// SPDX-License-Identifier: BSD-3-Clause
// reduce_scatter_perf: rank r ends with block r of the reduction of every rank's buffer.
#include "common.hpp"

namespace {

// Per rank: n blocks of count / n in, one block out; in place the output is block `rank`.
bench::Counts counts(std::size_t count, int n) {
  const std::size_t per_rank = count / static_cast<std::size_t>(n);
  return {per_rank * static_cast<std::size_t>(n), per_rank, per_rank, 0, per_rank};
}

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

std::optional<std::int64_t> expected(const bench::Pattern& p, int rank, int, bool, std::size_t i,
                                     const bench::Counts& c) {
  return bench::reduced_value(p, static_cast<std::size_t>(rank) * c.recv + i);
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  works.push_back(c.group.reduce_scatter(c.send, c.recv, {.op = c.op, .wire_dtype = c.wire}));
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"reduce_scatter_perf",
                                       bench::Coll::reduce_scatter,
                                       /*uses_op=*/true,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/true,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
