// SPDX-License-Identifier: BSD-3-Clause
// sendrecv_perf: each rank sends to rank + 1 and receives from rank - 1 (a ring shift).
#include "common.hpp"

namespace {

bench::Counts counts(std::size_t count, int) { return {count, count, count, 0, 0}; }

std::int64_t input(const bench::Pattern& p, int rank, int, std::size_t i, const bench::Counts&) {
  return bench::input_value(p, rank, i);
}

std::optional<std::int64_t> expected(const bench::Pattern& p, int rank, int, bool, std::size_t i,
                                     const bench::Counts&) {
  return bench::input_value(p, (rank - 1 + p.nranks) % p.nranks, i);
}

void run(const bench::Call& c, std::vector<std::shared_ptr<chorus::Work>>& works) {
  const int n = c.group.size();
  const int me = c.group.rank();
  works.push_back(c.group.recv(c.recv, (me - 1 + n) % n, c.tag));
  works.push_back(c.group.send(c.send, (me + 1) % n, c.tag));
}

}  // namespace

int main(int argc, char** argv) {
  // In place would send and receive through one buffer at once: not a meaningful chorus call,
  // so those columns print N/A.
  static const bench::CollBench kBench{"sendrecv_perf",
                                       bench::Coll::sendrecv,
                                       /*uses_op=*/false,
                                       /*uses_root=*/false,
                                       /*has_in_place=*/false,
                                       counts,
                                       input,
                                       expected,
                                       run};
  return bench::run_benchmark(argc, argv, kBench);
}
