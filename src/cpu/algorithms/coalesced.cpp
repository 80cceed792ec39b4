// SPDX-License-Identifier: BSD-3-Clause
// A coalesced op (OpDescriptor::ins/outs: several tensors, one op) as one schedule: the parts
// packed into scratch, the op's ordinary algorithm run once on the packed buffer, the result
// unpacked into the parts' outputs.
//
// Why packing rather than an algorithm per part: torch hands over hundreds of small gradients
// at once, and one op over their sum pays one op's rounds, not one per tensor; the choice by
// size, every algorithm and the signature check apply unchanged. The price is a local copy in
// and out, small next to the transfers.
#include <span>

#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {

void build_coalesced(Schedule& s, const CollectiveArgs& a) {
  const std::span<const CoalescedPart> parts(a.parts, a.num_parts);
  const std::size_t total = a.count;  // the parts' counts summed (per rank, as OpSignature)
  if (total == 0) {
    return;  // nothing to move: an op of count 0 completes without traffic
  }
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const auto n = static_cast<std::size_t>(s.size());
  // Layouts: allreduce, one buffer reduced in place. allgather: `total` in, n x total out,
  // rank j's block holding its parts in order. reduce_scatter: n x total in, block j holding
  // every part's block j in order; `total` out.
  const bool gathers = a.kind == OpType::allgather;
  const bool scatters = a.kind == OpType::reduce_scatter;
  void* packed_in = s.scratch((scatters ? n : 1) * total * es);
  void* packed_out =
      a.kind == OpType::allreduce ? packed_in : s.scratch((gathers ? n : 1) * total * es);

  const TaskId packing = s.next_id();
  std::size_t offset = 0;
  for (const CoalescedPart& p : parts) {
    if (scatters) {
      for (std::size_t j = 0; j < n; ++j) {
        s.copy(at(packed_in, j * total + offset, dt), at(p.in, j * p.count, dt), p.count * es);
      }
    } else {
      s.copy(at(packed_in, offset, dt), p.in, p.count * es);
    }
    offset += p.count;
  }
  const TaskId packed = s.join_range(packing, s.next_id());

  CollectiveArgs whole = a;
  whole.parts = nullptr;
  whole.num_parts = 0;
  whole.in = packed_in;
  whole.out = packed_out;
  const TaskId first = s.next_id();
  build_chosen(s, whole);  // scratch on every rank: nothing to agree on
  const TaskId last = s.next_id();
  // Every task of the op waits for the packing, receives too: they write into the packed
  // buffer (allreduce: the one being packed).
  for (TaskId t = first; t < last; ++t) {
    s.depend(t, packed);
  }
  const TaskId done = last > first ? s.join_range(first, last) : packed;
  auto unpack = [parts, packed_out, total, dt, es, n, gathers](Schedule& in, TaskId after) {
    std::size_t offset = 0;
    for (const CoalescedPart& p : parts) {
      if (gathers) {
        for (std::size_t j = 0; j < n; ++j) {
          in.copy(at(p.out, j * p.count, dt), at(packed_out, j * total + offset, dt), p.count * es,
                  {after});
        }
      } else {
        in.copy(p.out, at(packed_out, offset, dt), p.count * es, {after});
      }
      offset += p.count;
    }
  };
  if (Schedule::Continuation rest = s.take_continuation()) {
    // The algorithm builds the rest of its work once its first phase is done (direct forced:
    // once the peers' keys arrived): the result is there only once that rest is.
    s.then([rest = std::move(rest), unpack](Schedule& next) {
      rest(next);
      unpack(next, next.join_all());
    });
    return;
  }
  unpack(s, done);
}

}  // namespace chorus::cpu
