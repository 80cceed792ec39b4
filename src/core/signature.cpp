// SPDX-License-Identifier: BSD-3-Clause
// OpSignature encoding and the message that names two disagreeing ranks.
#include "core/signature.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "core/op_rules.hpp"

namespace chorus {
namespace {

constexpr std::uint32_t kMagic = 0x47534843;  // "CHSG" little-endian
// 3: kind is the OpType, byte 12 the wire (0: the dtype's own, else 1 + the wire's DataType),
// 13..15 the parts.
constexpr std::uint8_t kVersion = 3;

}  // namespace

EncodedSignature encode(const OpSignature& sig) noexcept {
  EncodedSignature out{};
  put_le(&out[0], kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<std::uint8_t>(sig.kind);
  out[6] = static_cast<std::uint8_t>(sig.dtype);
  out[7] = static_cast<std::uint8_t>(sig.redop);
  put_le(&out[8], static_cast<std::uint32_t>(sig.root), 4);
  out[12] = sig.wire ? static_cast<std::uint8_t>(1 + static_cast<int>(*sig.wire)) : 0;
  put_le(&out[13], sig.parts, 3);
  put_le(&out[16], sig.count, 8);
  put_le(&out[24], sig.seq, 8);
  return out;
}

std::optional<OpSignature> decode_signature(const std::uint8_t* bytes) noexcept {
  if (get_le(bytes, 4) != kMagic || bytes[4] != kVersion) {
    return std::nullopt;
  }
  // Only collectives carry a signature: a point-to-point kind is as foreign as an unknown one.
  if (bytes[5] >= kNumOpTypes || !op_rule(static_cast<OpType>(bytes[5])).collective ||
      bytes[6] >= kNumDataTypes || bytes[7] >= kNumReduceOps || bytes[12] > kNumDataTypes) {
    return std::nullopt;
  }
  OpSignature sig;
  sig.kind = static_cast<OpType>(bytes[5]);
  sig.dtype = static_cast<DataType>(bytes[6]);
  sig.redop = static_cast<ReduceOp>(bytes[7]);
  sig.root = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(&bytes[8], 4)));
  sig.count = get_le(&bytes[16], 8);
  sig.seq = get_le(&bytes[24], 8);
  sig.parts = static_cast<std::uint32_t>(get_le(&bytes[13], 3));
  if (bytes[12] != 0) {
    sig.wire = static_cast<DataType>(bytes[12] - 1);
  }
  return sig;
}

std::string describe(const OpSignature& sig) {
  const OpRule& rule = op_rule(sig.kind);
  std::string out = fmt::format("{} (seq {}", rule.name, sig.seq);
  if (sig.kind != OpType::barrier) {
    out += fmt::format(", {} x {}", sig.count, to_string(sig.dtype));
  }
  if (sig.parts != 0) {
    out += fmt::format(" in {} tensors", sig.parts);
  }
  if (rule.reduces) {
    out += fmt::format(", {}", to_string(sig.redop));
  }
  if (sig.wire) {
    out += fmt::format(", {} wire", to_string(*sig.wire));
  }
  if (rule.rooted) {
    out += fmt::format(", root {}", sig.root);
  }
  return out + ")";
}

std::string describe_mismatch(const OpSignature& mine, int my_rank, const OpSignature& theirs,
                              int their_rank) {
  std::string what;
  if (mine.seq != theirs.seq) {
    what = "the ranks are at different points in the op sequence";
  } else if (mine.kind != theirs.kind) {
    what = "different collectives";
  } else {
    std::string fields;
    auto add = [&](bool differs, const char* name) {
      if (differs) {
        fields += fields.empty() ? name : fmt::format(", {}", name);
      }
    };
    add(mine.count != theirs.count, "count");
    add(mine.parts != theirs.parts, "number of tensors");
    add(mine.dtype != theirs.dtype, "dtype");
    add(mine.redop != theirs.redop, "reduce op");
    add(mine.wire != theirs.wire, "wire dtype (CHORUS_WIRE_DTYPE or the op's wire_dtype)");
    add(mine.root != theirs.root, "root");
    what = fmt::format("same collective, different {}", fields);
  }
  return fmt::format("rank {} issued {} but rank {} issued {} ({})", my_rank, describe(mine),
                     their_rank, describe(theirs), what);
}

}  // namespace chorus
