// SPDX-License-Identifier: BSD-3-Clause
// all_reduce_perf: every rank ends with the reduction of every rank's buffer.
#include "common.hpp"

namespace {

bench::Counts counts(std::size_t count, int) { return {count, count, count, 0, 0}; }

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

std::optional<std::int64_t> expected(const bench::Pattern& p, int, int, bool, std::size_t i,
                                     const bench::Counts&) {
  return bench::reduced_value(p, i);
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  works.push_back(c.group.allreduce(c.send, c.recv, {.op = c.op, .wire_dtype = c.wire}));
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"all_reduce_perf",
                                       bench::Coll::all_reduce,
                                       /*uses_op=*/true,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/true,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
