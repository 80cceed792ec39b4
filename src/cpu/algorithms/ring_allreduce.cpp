// SPDX-License-Identifier: BSD-3-Clause
// Pipelined ring allreduce: a ring reduce-scatter followed by a ring allgather.
//
// The count is cut into n chunks (chunk c = block_of(count, n, c)) and each chunk into slices
// of slice_bytes. Rank r sends to next = r+1 and receives from prev = r-1 (mod n).
//   reduce-scatter step s = 0..n-2: send chunk r-s (step 0: straight from `in`; later: the
//     slice this rank reduced at step s-1), receive chunk r-s-1 and reduce
//     out[c] = in[c] op received (Schedule::recv_reduce: as it arrives where the transport can,
//     e.g. straight out of a shared-memory ring; else through a scratch slot). After n-1 steps rank
//     r holds the full reduction of chunk r+1. The last reduction also divides for avg, so
//     float16/bfloat16 round once there.
//   allgather step s = 0..n-2: send chunk r+1-s, receive chunk r-s straight into `out`.
// Per slice, the graph links recv_reduce -> next step's send, so slices pipeline: while
// slice j is reduced, slice j+1 is arriving and slice j-1 is leaving. kPipelineSlots scratch
// slots bound the memory; a receive waits for the one that last used its slot. An
// allgather receive into chunk c waits for the reduce-scatter send that read chunk c
// (in-place, that memory is about to be overwritten).
// Posting order: every allgather send would otherwise queue behind all reduce-scatter sends
// of the stream, so the reduced data left the cache long before the kernel copied it out
// (for 2 ranks: 32 MiB later). Instead the allgather transfers are merged into the last
// reduce-scatter step's FIFO, kAllgatherLag slices behind (Schedule::interleave). Only the
// posting order changes; allgather slice i then waits for the reduction of slice i, which
// needs only reduce-scatter transfers that precede it in both ranks' FIFOs, so no cycle.
// Every chunk reaches every rank through one chain of reductions in a fixed order, so all
// ranks end with identical bits. With a wire between hosts (core/wire.hpp) the transfers to
// other hosts carry rounded values, and the rank that finished a chunk rounds its own copy the
// same way before the allgather sends it, so the bits still agree.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {
namespace {
// Slices between a reduction of the last reduce-scatter step and the allgather send of its
// result. Small enough that the reduced slice is still in cache when the kernel copies it
// (one slot ring of 4 x 256 KiB behind), large enough that the send FIFO rarely waits for a
// reduction; a larger lag was no faster (docs/results.md, "Large allreduce on 2 ranks:
// interleaving the allgather").
constexpr std::size_t kAllgatherLag = 4;
}  // namespace

void build_ring_allreduce(Schedule& s, const CollectiveArgs& a) {
  const Schedule::AllowWire wire(s);
  const auto [n, r, next, prev, dt, es, per] = ring_setup(s, a);
  const int divisor = a.op == ReduceOp::avg ? n : 0;

  // n and per are captured by init-capture: clang 14 cannot capture structured bindings
  // (C++20 P1091, clang 16+).
  auto slices = [&, n = n, per = per](int c) {
    return num_slices(block_of(a.count, n, c).count, per);
  };
  // Element range of slice j of chunk c.
  auto slice = [&, n = n, per = per](int c, std::size_t j) {
    const Span b = block_of(a.count, n, c);
    return Span{b.offset + j * per, slice_count(b.count, per, j)};
  };

  // Chunk 0 is the largest (block_of gives the first count % n chunks one more element).
  const std::size_t slot = slot_elems(per, block_of(a.count, n, 0).count);
  auto* slots = static_cast<std::byte*>(s.scratch(kPipelineSlots * slot * es));
  std::vector<TaskId> slot_user(kPipelineSlots, kNoTask);
  std::size_t next_slot = 0;

  std::vector<std::vector<TaskId>> reduced(static_cast<std::size_t>(n));  // chunk -> per slice
  std::vector<std::vector<TaskId>> rs_sent(static_cast<std::size_t>(n));
  std::vector<std::vector<TaskId>> gathered(static_cast<std::size_t>(n));

  std::size_t last_send_mark = 0;
  std::size_t last_recv_mark = 0;
  for (int step = 0; step < n - 1; ++step) {
    const int sc = mod(r - step, n);
    const int rc = mod(r - step - 1, n);
    if (step == n - 2) {
      last_send_mark = s.sends_to(next);
      last_recv_mark = s.recvs_from(prev);
    }
    auto& sent = rs_sent[static_cast<std::size_t>(sc)];
    for (std::size_t j = 0; j < slices(sc); ++j) {
      const Span sp = slice(sc, j);
      if (step == 0) {
        sent.push_back(s.send(next, at(a.in, sp.offset, dt), sp.count * es));
      } else {
        sent.push_back(s.send(next, at(a.out, sp.offset, dt), sp.count * es,
                              {reduced[static_cast<std::size_t>(sc)][j]}));
      }
    }
    auto& red = reduced[static_cast<std::size_t>(rc)];
    for (std::size_t j = 0; j < slices(rc); ++j) {
      const Span sp = slice(rc, j);
      const std::size_t k = next_slot++ % kPipelineSlots;
      std::byte* into = slots + k * slot * es;
      const TaskId rd = s.recv_reduce(prev, at(a.out, sp.offset, dt), at(a.in, sp.offset, dt), into,
                                      sp.count, step == n - 2 ? divisor : 0, true, {slot_user[k]});
      slot_user[k] = rd;
      red.push_back(rd);
    }
  }
  const std::size_t rs_sends = s.sends_to(next);
  const std::size_t rs_recvs = s.recvs_from(prev);
  for (int step = 0; step < n - 1; ++step) {
    const int sc = mod(r + 1 - step, n);
    const int rc = mod(r - step, n);
    for (std::size_t j = 0; j < slices(sc); ++j) {
      const Span sp = slice(sc, j);
      // The chunk this rank finished is rounded as the wire would round it, so that it keeps
      // what the other ranks receive (no-op without a wire).
      const TaskId dep = step == 0 ? s.round_to_wire(at(a.out, sp.offset, dt), sp.count,
                                                     reduced[static_cast<std::size_t>(sc)][j])
                                   : gathered[static_cast<std::size_t>(sc)][j];
      s.send(next, at(a.out, sp.offset, dt), sp.count * es, {dep});
    }
    auto& got = gathered[static_cast<std::size_t>(rc)];
    const auto& readers = rs_sent[static_cast<std::size_t>(rc)];
    for (std::size_t j = 0; j < slices(rc); ++j) {
      const Span sp = slice(rc, j);
      got.push_back(s.recv(prev, at(a.out, sp.offset, dt), sp.count * es,
                           {j < readers.size() ? readers[j] : kNoTask}));
    }
  }
  // Post each allgather transfer kAllgatherLag slices after the reduce-scatter transfer of the
  // same slice in the last step (see the top of this file). The receiver's FIFO gets the same
  // rule: its receive sequence matches this rank's send sequence item by item.
  s.interleave(next, true, rs_sends, last_send_mark + kAllgatherLag);
  s.interleave(prev, false, rs_recvs, last_recv_mark + kAllgatherLag);
}

AlgorithmRows ring_allreduce_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allreduce, AlgorithmId::ring, always, always, false, ring_allreduce_us,
       build_ring_allreduce},
  };
  return kRows;
}

}  // namespace chorus::cpu
