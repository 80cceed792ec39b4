// SPDX-License-Identifier: BSD-3-Clause
// All-to-all by pairwise exchange: at offset i = 1..n-1 rank r sends block r+i to rank r+i
// and receives block r-i from rank r-i, all posted at once (the transport drives every peer
// concurrently; the staggered order spreads the first bytes over different peers).
// In place, the input is first copied to scratch: receiving straight into blocks still
// waiting to be sent would make each rank's receive wait for its own send, and with bounded
// socket buffers two ranks could wait on each other.
#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_all_to_all(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t m = a.count / static_cast<std::size_t>(n);
  const std::size_t bytes = m * element_size(dt);
  const void* src = a.in;
  TaskId staged = kNoTask;
  if (a.in == a.out && n > 1) {
    void* tmp = s.scratch(a.count * element_size(dt));
    staged = s.copy(tmp, a.in, a.count * element_size(dt));
    src = tmp;
  }
  for (int i = 1; i < n; ++i) {
    const int to = mod(r + i, n);
    s.send(to, at(src, static_cast<std::size_t>(to) * m, dt), bytes, {staged});
  }
  for (int i = 1; i < n; ++i) {
    const int from = mod(r - i, n);
    s.recv(from, at(a.out, static_cast<std::size_t>(from) * m, dt), bytes, {staged});
  }
  const auto own = static_cast<std::size_t>(r) * m;
  s.copy(at(a.out, own, dt), at(a.in, own, dt), bytes);
}

namespace {

// all_to_allv: all_to_all's pairwise exchange with a count per peer (in_counts[j] elements to
// rank j, out_counts[i] from rank i), none between ranks whose block is empty.

// Block j of the input goes to rank j; block i of the output comes from rank i.
void build_pairwise_all_to_allv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> in_off = block_offsets(a.in_counts, n);
  const std::vector<std::size_t> out_off = block_offsets(a.out_counts, n);
  for (int i = 1; i < n; ++i) {
    const int to = mod(r + i, n);
    s.send(to, at(a.in, in_off[static_cast<std::size_t>(to)], dt), a.in_counts[to] * es);
  }
  for (int i = 1; i < n; ++i) {
    const int from = mod(r - i, n);
    s.recv(from, at(a.out, out_off[static_cast<std::size_t>(from)], dt), a.out_counts[from] * es);
  }
  s.copy(at(a.out, out_off[static_cast<std::size_t>(r)], dt),
         at(a.in, in_off[static_cast<std::size_t>(r)], dt), a.in_counts[r] * es);
}

}  // namespace

AlgorithmRows all_to_all_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::all_to_all, AlgorithmId::pairwise, always, always, false, free_of_choice,
       build_all_to_all},
      {OpType::all_to_allv, AlgorithmId::pairwise, always, always, false, free_of_choice,
       build_pairwise_all_to_allv},
  };
  return kRows;
}

}  // namespace chorus::cpu
