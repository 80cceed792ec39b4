// SPDX-License-Identifier: BSD-3-Clause
// Halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving, then an
// allgather by recursive doubling. It moves the same bytes as the ring, 2(p-1)/p of the
// payload each way, in 2 log2 p rounds instead of 2(p-1): fewer hand-offs between ranks,
// which is what a ring of 4 processes on 2 cores pays for at mid sizes.
//
// Non-powers of two fold first, as recursive doubling does (rd_allreduce.cpp): with p the
// largest power of two <= n and rem = n - p, even rank 2i < 2 rem sends its input to 2i+1 and
// gets the result back at the end; odd rank 2i+1 reduces (partner's value first) and takes
// virtual rank i; the others take virtual rank r - rem.
//
// Among the p virtual ranks the payload is cut into p blocks (block_of), each block into
// slices of slice_bytes; every transfer is one slice of one block, so later rounds can start
// on a slice as soon as the round before finished it.
//   reduce-scatter, mask = p/2 .. 1: virtual rank v holds blocks [lo, lo + 2 mask) with
//     v's own block among them. It keeps the half with block v, sends the other half to
//     v ^ mask and reduces what that partner sends for the kept half (lower virtual rank's
//     value first). After the last round, v holds block v reduced over every rank (the last
//     round divides for avg).
//   allgather, mask = 1 .. p/2: v sends the mask blocks it holds to v ^ mask and receives the
//     partner's mask blocks straight into `out`.
// Each block is reduced to its final value by one rank only and copied to the others, so all
// ranks end with identical bits; with a wire between hosts (core/wire.hpp) that rank rounds
// its block as the wire does before the allgather. In place, a receive into a block waits for the
// send that read it during the reduce-scatter.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_hd_allreduce(Schedule& s, const CollectiveArgs& a) {
  const Schedule::AllowWire wire(s);
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::size_t per = slice_elems(a);
  const int divisor = a.op == ReduceOp::avg ? n : 0;
  int p = 1;
  while (p * 2 <= n) {
    p *= 2;
  }
  const int rem = n - p;

  // Block b's slice j: its element range, and the last task that wrote it (kNoTask: still
  // the input) and the reduce-scatter send that read it.
  auto slices = [&](int b) { return num_slices(block_of(a.count, p, b).count, per); };
  auto slice = [&](int b, std::size_t j) {
    const Span blk = block_of(a.count, p, b);
    return Span{blk.offset + j * per, slice_count(blk.count, per, j)};
  };
  std::vector<std::vector<TaskId>> writer(static_cast<std::size_t>(p));
  std::vector<std::vector<TaskId>> reader(static_cast<std::size_t>(p));
  for (int b = 0; b < p; ++b) {
    writer[static_cast<std::size_t>(b)].assign(slices(b), kNoTask);
    reader[static_cast<std::size_t>(b)].assign(slices(b), kNoTask);
  }

  const std::size_t slot = slot_elems(per, block_of(a.count, p, 0).count);
  auto* slots = static_cast<std::byte*>(s.scratch(kPipelineSlots * slot * es));
  std::vector<TaskId> slot_user(kPipelineSlots, kNoTask);
  std::size_t next_slot = 0;
  // out[slice] = local op received (or received op local), through the next free slot.
  auto recv_reduce = [&](int peer, int b, std::size_t j, const void* local, int div,
                         bool local_first) {
    const Span sp = slice(b, j);
    const std::size_t k = next_slot++ % kPipelineSlots;
    auto& w = writer[static_cast<std::size_t>(b)][j];
    const TaskId t =
        s.recv_reduce(peer, at(a.out, sp.offset, dt), at(local, sp.offset, dt),
                      slots + k * slot * es, sp.count, div, local_first, {w, slot_user[k]});
    slot_user[k] = t;
    w = t;
  };
  // Every slice of blocks [first, first + count), in block order (both ends of a stream add
  // the same sequence).
  auto for_blocks = [&](int first, int count, auto&& fn) {
    for (int b = first; b < first + count; ++b) {
      for (std::size_t j = 0; j < slices(b); ++j) {
        fn(b, j);
      }
    }
  };

  // Folding.
  int v = 0;
  const void* partial = a.in;  // where this rank's partial sums live
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      for_blocks(0, p, [&](int b, std::size_t j) {
        const Span sp = slice(b, j);
        reader[static_cast<std::size_t>(b)][j] =
            s.send(r + 1, at(a.in, sp.offset, dt), sp.count * es);
      });
      // In place, the result lands where the input was read.
      for_blocks(0, p, [&](int b, std::size_t j) {
        const Span sp = slice(b, j);
        s.recv(r + 1, at(a.out, sp.offset, dt), sp.count * es,
               {reader[static_cast<std::size_t>(b)][j]});
      });
      return;
    }
    for_blocks(0, p, [&](int b, std::size_t j) { recv_reduce(r - 1, b, j, a.in, 0, false); });
    partial = a.out;
    v = r / 2;
  } else {
    v = r - rem;
  }
  auto real = [&](int virt) { return virt < rem ? 2 * virt + 1 : virt + rem; };

  // Reduce-scatter by recursive halving.
  int lo = 0;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int vpeer = v ^ mask;
    const int peer = real(vpeer);
    const bool upper = (v & mask) != 0;
    const int keep = upper ? lo + mask : lo;
    const int give = upper ? lo : lo + mask;
    for_blocks(give, mask, [&](int b, std::size_t j) {
      const Span sp = slice(b, j);
      auto& w = writer[static_cast<std::size_t>(b)][j];
      reader[static_cast<std::size_t>(b)][j] =
          s.send(peer, at(partial, sp.offset, dt), sp.count * es, {w});
    });
    const int div = mask == 1 ? divisor : 0;
    for_blocks(keep, mask,
               [&](int b, std::size_t j) { recv_reduce(peer, b, j, partial, div, v < vpeer); });
    partial = a.out;
    lo = keep;
  }

  // This rank's block is final: round it as the wire would (no-op without one), so that this
  // rank keeps what the others receive.
  for_blocks(lo, 1, [&](int b, std::size_t j) {
    const Span sp = slice(b, j);
    auto& w = writer[static_cast<std::size_t>(b)][j];
    w = s.round_to_wire(at(a.out, sp.offset, dt), sp.count, w);
  });

  // Allgather by recursive doubling.
  for (int mask = 1; mask < p; mask *= 2) {
    const int vpeer = v ^ mask;
    const int peer = real(vpeer);
    for_blocks(v & ~(mask - 1), mask, [&](int b, std::size_t j) {
      const Span sp = slice(b, j);
      s.send(peer, at(a.out, sp.offset, dt), sp.count * es,
             {writer[static_cast<std::size_t>(b)][j]});
    });
    for_blocks(vpeer & ~(mask - 1), mask, [&](int b, std::size_t j) {
      const Span sp = slice(b, j);
      writer[static_cast<std::size_t>(b)][j] = s.recv(peer, at(a.out, sp.offset, dt), sp.count * es,
                                                      {reader[static_cast<std::size_t>(b)][j]});
    });
  }

  if (r < 2 * rem) {
    for_blocks(0, p, [&](int b, std::size_t j) {
      const Span sp = slice(b, j);
      s.send(r - 1, at(a.out, sp.offset, dt), sp.count * es,
             {writer[static_cast<std::size_t>(b)][j]});
    });
  }
}

AlgorithmRows hd_allreduce_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allreduce, AlgorithmId::halving_doubling, always, always, false, halving_doubling_us,
       build_hd_allreduce},
  };
  return kRows;
}

}  // namespace chorus::cpu
