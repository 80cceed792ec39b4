// SPDX-License-Identifier: BSD-3-Clause
// OpSignature: what a rank believes the collective at a sequence number is. Carried in the
// data path (32 bytes per op and peer) so that ranks disagreeing on op, count, dtype, root or
// operator fail naming both signatures instead of corrupting data or hanging.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <chorus/process_group.hpp>
#include <chorus/types.hpp>

namespace chorus {

// Fields that do not apply to an op (root of allreduce, redop of allgather ...) are zero.
// count is the per-rank element count the op was called with (the input's, or the output's for
// the ops that scatter; each op's is chosen in CpuProcessGroup::start()). The variable-size
// collectives carry the sum of their per-rank counts where every rank passes the same counts,
// else 0. A coalesced op (OpDescriptor::ins) carries the sum over its tensors.
// `kind` is the public OpType (a collective one: send and recv have no signature), its value on
// the wire, so that no second list of ops exists for the wire.
struct OpSignature {
  OpType kind = OpType::barrier;
  DataType dtype = DataType::uint8;
  ReduceOp redop = ReduceOp::sum;
  std::int32_t root = 0;
  std::uint64_t count = 0;
  std::uint64_t seq = 0;
  // Tensors of a coalesced op (OpDescriptor::ins.size()); 0 for an op on one input and output.
  // Ranks that split the same total differently disagree here.
  std::uint32_t parts = 0;
  // The narrower type the op's data travels in between hosts (core/wire.hpp); unset: full
  // precision. Ranks that disagree would send streams of different lengths.
  std::optional<DataType> wire;

  friend bool operator==(const OpSignature&, const OpSignature&) = default;
};

inline constexpr std::size_t kSignatureBytes = 32;
using EncodedSignature = std::array<std::uint8_t, kSignatureBytes>;

// Fixed little-endian layout: magic "CHSG", version (3), kind (the OpType's value), dtype,
// redop, root, the wire (0: full precision, else 1 + its DataType), parts (3 bytes), count, seq.
// Whether an op's buffers are SharedBuffers is not part of it: ranks may differ there
// (algorithms/direct.cpp agrees in-band).
inline constexpr std::uint32_t kMaxSignatureParts = (1u << 24) - 1;
EncodedSignature encode(const OpSignature& sig) noexcept;
// nullopt if the bytes are not a signature (bad magic, version or enum value): the stream
// carrying them is out of step.
std::optional<OpSignature> decode_signature(const std::uint8_t* bytes) noexcept;

// "allreduce (seq 5, 1024 x float32, sum)"; the fields that apply to the op only.
std::string describe(const OpSignature& sig);
// One sentence naming both sides, e.g. "rank 0 issued allreduce (seq 5, 1024 x float32, sum)
// but rank 2 issued broadcast (seq 5, 1024 x float32, root 0)".
std::string describe_mismatch(const OpSignature& mine, int my_rank, const OpSignature& theirs,
                              int their_rank);

}  // namespace chorus
