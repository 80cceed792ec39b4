// SPDX-License-Identifier: BSD-3-Clause
// broadcast_perf: every rank ends with the root's buffer.
#include "common.hpp"

namespace {

bench::Counts counts(std::size_t count, int) { return {count, count, count, 0, 0}; }

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

std::optional<std::int64_t> expected(const bench::Pattern& p, int, int root, bool, std::size_t i,
                                     const bench::Counts&) {
  return bench::input_value(p, root, i);
}

// Out of place (nccl-tests' send -> recv): chorus broadcasts one buffer per rank, so the root
// sends from its input buffer and the others receive into their output buffer; no copy.
void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  const chorus::Tensor buffer = c.in_place || c.group.rank() != c.root ? c.recv : c.send;
  works.push_back(c.group.broadcast(buffer, {.root = c.root}));
}

}  // namespace

int main(int argc, char** argv) {
  static const bench::CollBench kBench{"broadcast_perf",
                                       bench::Coll::broadcast,
                                       /*uses_op=*/false,
                                       /*uses_root=*/true,
                                       /*has_in_place=*/true,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
