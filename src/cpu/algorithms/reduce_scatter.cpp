// SPDX-License-Identifier: BSD-3-Clause
// Pipelined ring reduce-scatter.
//
// in holds n chunks of m = count elements; rank r's result is the reduction of chunk r.
// Step s = 0..n-2: send chunk r-s-1 (step 0: from `in`; later: the partial this rank made at
// step s-1), receive the partial of chunk r-s-2 from prev and reduce it with in[chunk] (as it
// arrives where the transport can, else through a receive slot: Schedule::recv_reduce): into
// a partial buffer (forwarded at the next step), or, at the last step
// (where the chunk is r itself), straight into out, dividing for avg. Slices pipeline as in
// ring_allreduce.cpp: kPipelineSlots receive slots, reused once their reduction finished, and
// two chunk-sized partial buffers used by alternate steps (a partial made at step s is
// overwritten at step s+2 only after the step s+1 send of the same slice left). `in` is never
// written, so out-of-place leaves the input intact; in place (out = chunk r of in), chunk r is
// only read by the final reduction that overwrites it.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_ring_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  const Schedule::AllowWire wire(s);  // each block's result lives on one rank
  const auto [n, r, next, prev, dt, es, per] = ring_setup(s, a);
  const std::size_t m = a.count;
  const std::size_t ns = num_slices(m, per);
  const int divisor = a.op == ReduceOp::avg ? n : 0;

  const std::size_t slot = slot_elems(per, m);
  auto* rslots = static_cast<std::byte*>(s.scratch(kPipelineSlots * slot * es));
  std::byte* partials[2] = {nullptr, nullptr};
  if (n > 2) {
    partials[0] = static_cast<std::byte*>(s.scratch(m * es));
    partials[1] = static_cast<std::byte*>(s.scratch(m * es));
  }
  std::vector<TaskId> rslot_user(kPipelineSlots, kNoTask);
  std::size_t next_r = 0;

  std::vector<TaskId> partial(ns, kNoTask);  // reduction that produced the slice to send
  std::vector<TaskId> sent(ns, kNoTask);     // last send of each slice from a partial buffer
  for (int step = 0; step < n - 1; ++step) {
    const auto sc = static_cast<std::size_t>(mod(r - step - 1, n));
    const auto rc = static_cast<std::size_t>(mod(r - step - 2, n));
    const std::vector<TaskId> sent_before = sent;  // step s-1 sends read partials[step & 1]
    std::byte* const from = partials[(step - 1) & 1];
    std::byte* const into = partials[step & 1];
    for (std::size_t j = 0; j < ns; ++j) {
      const std::size_t bytes = slice_count(m, per, j) * es;
      if (step == 0) {
        s.send(next, at(a.in, sc * m + j * per, dt), bytes);
      } else {
        sent[j] = s.send(next, from + j * per * es, bytes, {partial[j]});
      }
    }
    const bool last = step == n - 2;
    for (std::size_t j = 0; j < ns; ++j) {
      const std::size_t cnt = slice_count(m, per, j);
      const std::size_t k = next_r++ % kPipelineSlots;
      std::byte* rslot = rslots + k * slot * es;
      const void* mine = at(a.in, rc * m + j * per, dt);
      TaskId rd;
      if (last) {
        rd = s.recv_reduce(prev, at(a.out, j * per, dt), mine, rslot, cnt, divisor, true,
                           {rslot_user[k]});
      } else {
        // Reduced as it arrives, into memory that step s-1's send of this slice reads: that
        // send must have left first.
        rd = s.recv_reduce(prev, into + j * per * es, mine, rslot, cnt, 0, true,
                           {rslot_user[k], sent_before[j]});
      }
      rslot_user[k] = rd;
      partial[j] = rd;
    }
  }
}

namespace {

// reduce_scatterv: rank j gets block j (in_counts[j] elements) of the reduction, every peer at
// once, one message each way per pair, as allgather.cpp's pairwise exchange.

// Rank j gets block j of this rank's input. This rank's block is reduced with each peer's as
// the peers' blocks arrive, a chain of recv_reduce tasks through two alternating scratch
// buffers, the last one writing out (and dividing for avg). In place (out is the input's block
// r), the block is read by the first step only, and out is written by the last.
void build_pairwise_reduce_scatterv(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::vector<std::size_t> off = block_offsets(a.in_counts, n);
  const std::size_t m = a.in_counts[r];
  for (int i = 1; i < n; ++i) {
    const int to = mod(r + i, n);
    s.send(to, at(a.in, off[static_cast<std::size_t>(to)], dt), a.in_counts[to] * es);
  }
  const void* acc = at(a.in, off[static_cast<std::size_t>(r)], dt);
  if (m == 0) {
    return;
  }
  if (n == 1) {  // the rank's own block is the result (avg over one rank is the value itself)
    if (acc != a.out) {
      s.copy(a.out, acc, m * es);
    }
    return;
  }
  std::byte* partial[2] = {nullptr, nullptr};
  if (n > 2) {
    partial[0] = static_cast<std::byte*>(s.scratch(m * es));
    partial[1] = static_cast<std::byte*>(s.scratch(m * es));
  }
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

}  // namespace

AlgorithmRows reduce_scatter_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::reduce_scatter, AlgorithmId::ring, always, always, false, ring_block_us,
       build_ring_reduce_scatter},
      {OpType::reduce_scatterv, AlgorithmId::pairwise, always, always, false, free_of_choice,
       build_pairwise_reduce_scatterv},
  };
  return kRows;
}

}  // namespace chorus::cpu
