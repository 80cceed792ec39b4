// SPDX-License-Identifier: BSD-3-Clause
// The variable-size collectives (allgatherv, reduce_scatterv, all_to_allv) by pairwise
// exchange: each rank talks to every peer at once, one message each way per peer pair,
// posted in the staggered order of all_to_all.cpp (offset i = 1..n-1: to r+i, from r-i). The
// blocks of rank j have counts[j] elements and lie back to back in rank order. Peers whose
// block is empty exchange nothing (both ends know the counts). Per-rank sizes make the rings'
// equal slices inapplicable; one message per peer moves each byte once, which is what these
// ops (typically uneven shards or expert routing) need.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {
namespace {

// Element offset of each rank's block (prefix sums of counts).
std::vector<std::size_t> offsets(const std::size_t* counts, int n) {
  std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1, 0);
  for (int j = 0; j < n; ++j) {
    off[static_cast<std::size_t>(j) + 1] = off[static_cast<std::size_t>(j)] + counts[j];
  }
  return off;
}

}  // namespace

// out's block r is this rank's input (a local copy, none in place); block j arrives from rank j.
void build_pairwise_allgatherv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> off = offsets(a.out_counts, n);
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

// Rank j gets block j of this rank's input. This rank's block is reduced with each peer's as
// the peers' blocks arrive, a chain of recv_reduce tasks through two alternating scratch
// buffers, the last one writing out (and dividing for avg). In place (out is the input's block
// r), the block is read by the first step only, and out is written by the last.
void build_pairwise_reduce_scatterv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> off = offsets(a.in_counts, n);
  const std::size_t m = a.in_counts[r];
  for (int i = 1; i < n; ++i) {
    const int to = mod(r + i, n);
    s.send(to, at(a.in, off[static_cast<std::size_t>(to)], dt), a.in_counts[to] * es);
  }
  if (m == 0) {
    return;
  }
  std::byte* partial[2] = {nullptr, nullptr};
  if (n > 2) {
    partial[0] = static_cast<std::byte*>(s.scratch(m * es));
    partial[1] = static_cast<std::byte*>(s.scratch(m * es));
  }
  const void* acc = at(a.in, off[static_cast<std::size_t>(r)], dt);
  TaskId prev = kNoTask;
  for (int i = 1; i < n; ++i) {
    const bool last = i == n - 1;
    void* dst = last ? a.out : partial[i & 1];
    // Each step has a slot of its own: the receives from different peers arrive in any order.
    void* slot = s.scratch(m * es);
    prev = s.recv_reduce(mod(r - i, n), dst, acc, slot, m, last && a.op == ReduceOp::avg ? n : 0,
                         true, {prev});
    acc = dst;
  }
}

// Block j of the input goes to rank j; block i of the output comes from rank i.
void build_pairwise_all_to_allv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> in_off = offsets(a.in_counts, n);
  const std::vector<std::size_t> out_off = offsets(a.out_counts, n);
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

// One rank: the output is the input (avg over one rank is the value itself).
void build_variable_single_rank(Schedule& s, const CollectiveArgs& a) {
  const std::size_t* counts = a.kind == OpType::reduce_scatterv ? a.in_counts : a.out_counts;
  if (a.in != a.out) {
    s.copy(a.out, a.in, counts[0] * element_size(a.dtype));
  }
}

}  // namespace chorus::cpu
