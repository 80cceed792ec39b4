// SPDX-License-Identifier: BSD-3-Clause
// OpSignature encoding and the message that names two disagreeing ranks.
#include "core/signature.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"

namespace chorus {
namespace {

constexpr std::uint32_t kMagic = 0x47534843;  // "CHSG" little-endian
constexpr std::uint8_t kVersion = 2;

bool has_root(OpKind k) {
  return k == OpKind::broadcast || k == OpKind::reduce || k == OpKind::gather ||
         k == OpKind::scatter;
}
bool has_redop(OpKind k) {
  return k == OpKind::allreduce || k == OpKind::reduce_scatter || k == OpKind::reduce ||
         k == OpKind::reduce_scatterv;
}

}  // namespace

const char* to_string(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::allreduce:
      return "allreduce";
    case OpKind::allgather:
      return "allgather";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::reduce:
      return "reduce";
    case OpKind::gather:
      return "gather";
    case OpKind::scatter:
      return "scatter";
    case OpKind::all_to_all:
      return "all_to_all";
    case OpKind::barrier:
      return "barrier";
    case OpKind::allgatherv:
      return "allgatherv";
    case OpKind::reduce_scatterv:
      return "reduce_scatterv";
    case OpKind::all_to_allv:
      return "all_to_allv";
  }
  return "?";
}

EncodedSignature encode(const OpSignature& sig) noexcept {
  EncodedSignature out{};
  put_le(&out[0], kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<std::uint8_t>(sig.kind);
  out[6] = static_cast<std::uint8_t>(sig.dtype);
  out[7] = static_cast<std::uint8_t>(sig.redop);
  put_le(&out[8], static_cast<std::uint32_t>(sig.root), 4);
  // out[12..15] reserved (zero)
  put_le(&out[16], sig.count, 8);
  put_le(&out[24], sig.seq, 8);
  return out;
}

std::optional<OpSignature> decode_signature(const std::uint8_t* bytes) noexcept {
  if (get_le(bytes, 4) != kMagic || bytes[4] != kVersion) {
    return std::nullopt;
  }
  if (bytes[5] < static_cast<std::uint8_t>(OpKind::allreduce) ||
      bytes[5] > static_cast<std::uint8_t>(kLastOpKind) || bytes[6] >= kNumDataTypes ||
      bytes[7] >= kNumReduceOps || bytes[12] != 0) {
    return std::nullopt;
  }
  OpSignature sig;
  sig.kind = static_cast<OpKind>(bytes[5]);
  sig.dtype = static_cast<DataType>(bytes[6]);
  sig.redop = static_cast<ReduceOp>(bytes[7]);
  sig.root = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(&bytes[8], 4)));
  sig.count = get_le(&bytes[16], 8);
  sig.seq = get_le(&bytes[24], 8);
  return sig;
}

std::string describe(const OpSignature& sig) {
  std::string out = fmt::format("{} (seq {}", to_string(sig.kind), sig.seq);
  if (sig.kind != OpKind::barrier) {
    out += fmt::format(", {} x {}", sig.count, to_string(sig.dtype));
  }
  if (has_redop(sig.kind)) {
    out += fmt::format(", {}", to_string(sig.redop));
  }
  if (has_root(sig.kind)) {
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
    add(mine.dtype != theirs.dtype, "dtype");
    add(mine.redop != theirs.redop, "reduce op");
    add(mine.root != theirs.root, "root");
    what = fmt::format("same collective, different {}", fields);
  }
  return fmt::format("rank {} issued {} but rank {} issued {} ({})", my_rank, describe(mine),
                     their_rank, describe(theirs), what);
}

}  // namespace chorus
