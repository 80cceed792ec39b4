// SPDX-License-Identifier: BSD-3-Clause
// The shape rules of every op type, in one table: which counts, dtypes, roots and peers an
// OpDescriptor must have, which tensors this rank touches (checked against the backend's
// device), and how the op is numbered and traced. Backend::issue() applies them once for
// every backend, the C ABI and the torch bridge.
#pragma once

#include "core/private.hpp"

#include <cstdint>

#include <chorus/process_group.hpp>

namespace chorus {

namespace detail {
class Backend;
}

// One of an OpDescriptor's tensors (in, out), or neither.
enum class Operand : std::uint8_t { none, in, out };

// Which tensors a collective moves data through, for backends that hand the op's buffers to an
// engine of their own (the CPU backend) instead of a library call per op.
enum class Buffers : std::uint8_t {
  none,      // no data (barrier)
  in_place,  // `in` is both the input and the output (broadcast)
  in_out,    // `in` and `out`
};

struct OpRule {
  OpType type;
  const char* name;  // "allreduce" ... (to_string(OpType))
  // Numbered among the collectives (checked against the other ranks' ops at the same
  // sequence number); false: point-to-point, numbered on its own.
  bool collective;
  // The flight recorder describes the output (count, dtype) rather than the input: the ops
  // whose per-rank count is the output's (those that scatter).
  bool traces_output;
  // Has a root (OpDescriptor::root: broadcast, reduce, gather, scatter) / a reduction operator
  // (OpDescriptor::op): what the flight recorder, the tcp signature and its messages show.
  bool rooted;
  bool reduces;
  // Takes several tensors in one op (OpDescriptor::ins/outs); the others reject them.
  bool coalesces;
  // The op's data, as a backend's engine sees it (collectives only):
  Buffers buffers;
  // Whose count is the op's count per rank, the one every rank must agree on (OpSignature::
  // count): the input's, the output's, or none (barrier; an op whose totals differ between ranks).
  Operand count_of;
  // The tensor only the root uses (reduce, gather: out; scatter: in); `none`: every rank uses
  // both.
  Operand root_only;
  // Counts per rank (OpDescriptor::in_counts / out_counts) the op carries to its algorithm.
  bool in_counts;
  bool out_counts;
  // Throws InvalidArgument naming the op, the rank and what to fix, before anything is sent;
  // for a coalesced op (ins/outs) that each pair has the op's shape, and the list's own rules.
  void (*check)(const OpDescriptor& op, const detail::Backend& backend, const char* name);
};

// The rule of `type`; throws InvalidArgument when `type` is not an OpType.
const OpRule& op_rule(OpType type);

}  // namespace chorus
