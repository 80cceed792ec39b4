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
#include "cpu/algorithms/costs.hpp"

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

namespace {

// allgatherv: block j (out_counts[j] elements, the blocks back to back in rank order) comes
// from rank j, every peer at once, one message each way per pair (offset i = 1..n-1: to r+i,
// from r-i), none between ranks whose block is empty. Per-rank sizes make the ring's equal
// slices inapplicable; one message per peer moves each byte once.

// out's block r is this rank's input (a local copy, none in place); block j arrives from rank j.
void build_pairwise_allgatherv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> off = block_offsets(a.out_counts, n);
  const std::size_t mine = a.out_counts[r];
  for (int i = 1; i < n; ++i) {
    s.send(mod(r + i, n), a.in, mine * es);
  }
  for (int i = 1; i < n; ++i) {
    const int from = mod(r - i, n);
    s.recv(from, at(a.out, off[static_cast<std::size_t>(from)], dt), a.out_counts[from] * es);
  }
  void* own = at(a.out, off[static_cast<std::size_t>(r)], dt);
  if (own != a.in) {
    s.copy(own, a.in, mine * es);
  }
}

}  // namespace

AlgorithmRows allgather_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allgather, AlgorithmId::ring, always, always, false, ring_block_us,
       build_ring_allgather},
      {OpType::allgatherv, AlgorithmId::pairwise, always, always, false, free_of_choice,
       build_pairwise_allgatherv},
  };
  return kRows;
}

}  // namespace chorus::cpu
