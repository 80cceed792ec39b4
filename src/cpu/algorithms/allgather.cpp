// SPDX-License-Identifier: BSD-3-Clause
// Pipelined ring allgather.
//
// out holds n blocks of m = count elements; block b belongs to rank b. Rank r first places
// its input in block r (a local copy, skipped in place), then for step s = 0..n-2 sends block
// r-s to next and receives block r-s-1 from prev straight into out. Per slice, the send of
// block b at step s waits only for the receive of the same slice of b at step s-1, so slices
// stream through the ring without waiting for whole blocks.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {

void build_ring_allgather(Schedule& s, const CollectiveArgs& a) {
  const auto [n, r, next, prev, dt, es, per] = ring_setup(s, a);
  const std::size_t m = a.count;
  const std::size_t ns = num_slices(m, per);

  s.copy(at(a.out, static_cast<std::size_t>(r) * m, dt), a.in, m * es);
  std::vector<TaskId> prev_recv(ns, kNoTask);
  for (int step = 0; step < n - 1; ++step) {
    const auto sb = static_cast<std::size_t>(mod(r - step, n));
    const auto rb = static_cast<std::size_t>(mod(r - step - 1, n));
    std::vector<TaskId> got(ns, kNoTask);
    for (std::size_t j = 0; j < ns; ++j) {
      const std::size_t off = j * per;
      const std::size_t bytes = slice_count(m, per, j) * es;
      if (step == 0) {
        s.send(next, at(a.in, off, dt), bytes);
      } else {
        s.send(next, at(a.out, sb * m + off, dt), bytes, {prev_recv[j]});
      }
    }
    for (std::size_t j = 0; j < ns; ++j) {
      const std::size_t off = j * per;
      got[j] = s.recv(prev, at(a.out, rb * m + off, dt), slice_count(m, per, j) * es);
    }
    prev_recv = std::move(got);
  }
}

}  // namespace chorus::cpu
