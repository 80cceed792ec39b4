// SPDX-License-Identifier: BSD-3-Clause
// barrier_perf: the latency of a barrier. It moves no data: each size row times the same
// barrier (size and busbw columns are 0), and the in-place columns print N/A.
#include "common.hpp"

namespace {

bench::Counts counts(std::size_t, int) { return {0, 0, 0, 0, 0}; }

std::int64_t input(const bench::Pattern&, int, int, std::size_t, const bench::Counts&) { return 0; }

std::optional<std::int64_t> expected(const bench::Pattern&, int, int, bool, std::size_t,
                                     const bench::Counts&) {
  return std::nullopt;
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  works.push_back(c.group.barrier());
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"barrier_perf",
                                       bench::Coll::barrier,
                                       /*uses_op=*/false,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/false,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
