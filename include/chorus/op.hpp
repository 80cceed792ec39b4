// SPDX-License-Identifier: BSD-3-Clause
// OpDescriptor: one op of a process group described as data, and ProcessGroup::run(), the one
// entry every op goes through.
//
// Why the descriptor is public: the C++ methods (allreduce(), all_to_allv() ...), the C ABI and
// the torch backend all describe their op with it and hand it to the same entry, so an op's
// argument rules, sequence numbering, deadline and tracing exist once, and a new op is a new
// OpType, a row in the shape-rule table and the backends' implementation, not a new method in
// every layer. Programs that forward ops generically (bindings, schedulers) use it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus {

// recv()'s source for a message from any rank (MPI_ANY_SOURCE).
inline constexpr int kAnySource = -1;

// What an op does. The ProcessGroup method of the same name documents each one's shapes.
enum class OpType : std::uint8_t {
  allreduce,
  allgather,
  reduce_scatter,
  broadcast,
  reduce,
  gather,
  scatter,
  all_to_all,
  barrier,
  send,
  recv,
  allgatherv,       // counts per rank: out_counts
  reduce_scatterv,  // counts per rank: in_counts
  all_to_allv,      // counts per rank: in_counts (sent) and out_counts (received)
};
inline constexpr int kNumOpTypes = 14;
// "allreduce", "all_to_allv" ...; "?" if out of range.
CHORUS_API const char* to_string(OpType type) noexcept;

// One op, as plain data. Fields an op does not use are ignored (their defaults are fine).
// Tensors are borrowed until the op's Work completes; the count vectors are copied by run().
struct OpDescriptor {
  OpType type = OpType::barrier;
  Tensor in;   // the input (broadcast: the tensor, in place; send/recv: the message)
  Tensor out;  // the output (broadcast, send, recv, barrier: unused)
  // Elements per rank for the variable-size collectives, block j belonging to rank j and the
  // blocks laid out back to back in rank order: allgatherv's output (out_counts),
  // reduce_scatterv's input (in_counts), all_to_allv's input and output (both). Every rank
  // passes the same counts to allgatherv and reduce_scatterv; all_to_allv's in_counts[j] on
  // rank i equals out_counts[i] on rank j.
  std::vector<std::size_t> in_counts;
  std::vector<std::size_t> out_counts;
  ReduceOp op = ReduceOp::sum;      // allreduce, reduce_scatter(v), reduce
  int root = 0;                     // broadcast, reduce, gather, scatter
  int peer = -1;                    // send: the destination; recv: the source, or kAnySource
  std::uint32_t tag = 0;            // send, recv
  std::optional<Duration> timeout;  // unset: the group's timeout
  // Coalesced: several tensors, one op (torch's allreduce_coalesced, an NCCL group of calls).
  // When `ins` is not empty the op runs on the pairs (ins[i], outs[i]) instead of in/out, which
  // must then be empty. Each pair has the shape the op has on one tensor (allreduce: equal
  // counts; allgather: outs[i] holds size x ins[i], rank-major; reduce_scatter: ins[i] holds
  // size x outs[i]), any count, 0 included; all tensors have one dtype. In place: outs[i] is
  // ins[i] (allgather, reduce_scatter: the rank's block of the larger one, as on one tensor);
  // otherwise an input overlaps no output, and no two outputs overlap. It is one op: one
  // sequence number, one deadline, one Work, and on every rank the same number of tensors
  // with the same counts. allreduce, allgather and reduce_scatter only.
  std::vector<Tensor> ins;
  std::vector<Tensor> outs;
};

}  // namespace chorus
