// SPDX-License-Identifier: BSD-3-Clause
// Broadcast: binomial tree for small payloads, pipelined chain for large ones.
//
// Positions are relative to the root: v = r - root (mod n).
// Tree: v receives from v - lowbit(v) and forwards to v + 2^k for every 2^k < lowbit(v) (all
// k for the root) with v + 2^k < n, farthest subtree first: ceil(log2 n) rounds.
// Chain: v receives each slice from v-1 and forwards it to v+1 as soon as it arrived, so the
// whole payload streams down the chain in about (bytes + (n-2) slices) time instead of
// log2 n full copies per rank.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_tree_broadcast(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int v = mod(s.rank() - a.root, n);
  auto real = [&](int pos) { return mod(pos + a.root, n); };
  const std::size_t bytes = a.count * element_size(a.dtype);
  TaskId got = kNoTask;
  int limit = n;  // children are v + 2^k with 2^k < limit
  if (v != 0) {
    const int low = v & -v;
    got = s.recv(real(v - low), a.out, bytes);
    limit = low;
  }
  int top = 1;
  while (top * 2 < limit && v + top * 2 < n) {
    top *= 2;
  }
  for (int k = top; k >= 1; k >>= 1) {
    if (k < limit && v + k < n) {
      s.send(real(v + k), a.out, bytes, {got});
    }
  }
}

void build_chain_broadcast(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int v = mod(s.rank() - a.root, n);
  auto real = [&](int pos) { return mod(pos + a.root, n); };
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::size_t per = slice_elems(a);
  const std::size_t ns = num_slices(a.count, per);
  for (std::size_t j = 0; j < ns; ++j) {
    const std::size_t off = j * per;
    const std::size_t bytes = std::min(per, a.count - off) * es;
    TaskId got = kNoTask;
    if (v > 0) {
      got = s.recv(real(v - 1), at(a.out, off, dt), bytes);
    }
    if (v < n - 1) {
      s.send(real(v + 1), at(a.out, off, dt), bytes, {got});
    }
  }
}

AlgorithmRows broadcast_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::broadcast, AlgorithmId::tree, always, always, true, tree_us, build_tree_broadcast},
      {OpType::broadcast, AlgorithmId::chain, always, always, false, chain_us,
       build_chain_broadcast},
  };
  return kRows;
}

}  // namespace chorus::cpu
