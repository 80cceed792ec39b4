// SPDX-License-Identifier: BSD-3-Clause
// Control frame encoding.
#include "cpu/transports/wire.hpp"

#include "core/bytes.hpp"

namespace chorus::cpu {

std::array<std::uint8_t, kFrameHeaderBytes> encode_header(const FrameHeader& h) noexcept {
  std::array<std::uint8_t, kFrameHeaderBytes> out{};
  put_le(&out[0], static_cast<std::uint32_t>(h.type), 4);
  put_le(&out[4], h.tag, 4);
  put_le(&out[8], h.length, 8);
  return out;
}

FrameHeader decode_header(const std::uint8_t* b) noexcept {
  return {static_cast<FrameType>(get_le(&b[0], 4)), static_cast<std::uint32_t>(get_le(&b[4], 4)),
          get_le(&b[8], 8)};
}

// {code u32, seq u64, root_rank i32, peer count u32, peers i32..., message length u32,
//  message, root_message}
std::vector<std::uint8_t> encode(const AbortNotice& n) {
  std::vector<std::uint8_t> out;
  append_le(out, static_cast<std::uint32_t>(n.code), 4);
  append_le(out, n.seq, 8);
  append_le(out, static_cast<std::uint32_t>(n.root_rank), 4);
  append_le(out, n.peers.size(), 4);
  for (int p : n.peers) {
    append_le(out, static_cast<std::uint32_t>(p), 4);
  }
  append_le(out, n.message.size(), 4);
  out.insert(out.end(), n.message.begin(), n.message.end());
  out.insert(out.end(), n.root_message.begin(), n.root_message.end());
  return out;
}

std::optional<AbortNotice> decode_abort(const std::vector<std::uint8_t>& p) {
  if (p.size() < 20) {
    return std::nullopt;
  }
  AbortNotice n;
  n.code = static_cast<int>(get_le(&p[0], 4));
  n.seq = get_le(&p[4], 8);
  n.root_rank = static_cast<int>(static_cast<std::uint32_t>(get_le(&p[12], 4)));
  const std::uint64_t count = get_le(&p[16], 4);
  std::size_t at = 20;
  if (count > (p.size() - at) / 4) {
    return std::nullopt;
  }
  for (std::uint64_t i = 0; i < count; ++i, at += 4) {
    n.peers.push_back(static_cast<int>(static_cast<std::uint32_t>(get_le(&p[at], 4))));
  }
  if (p.size() - at < 4) {
    return std::nullopt;
  }
  const std::uint64_t len = get_le(&p[at], 4);
  at += 4;
  if (len > p.size() - at) {
    return std::nullopt;
  }
  n.message.assign(p.begin() + static_cast<std::ptrdiff_t>(at),
                   p.begin() + static_cast<std::ptrdiff_t>(at + len));
  n.root_message.assign(p.begin() + static_cast<std::ptrdiff_t>(at + len), p.end());
  return n;
}

// {last_seq u64, has_cause u8, cause (AbortNotice encoding)}
std::vector<std::uint8_t> encode(const Goodbye& g) {
  std::vector<std::uint8_t> out;
  append_le(out, g.last_seq, 8);
  append_le(out, g.cause ? 1u : 0u, 1);
  if (g.cause) {
    const std::vector<std::uint8_t> cause = encode(*g.cause);
    out.insert(out.end(), cause.begin(), cause.end());
  }
  return out;
}

std::optional<Goodbye> decode_goodbye(const std::vector<std::uint8_t>& p) {
  if (p.size() < 9) {
    return std::nullopt;
  }
  Goodbye g;
  g.last_seq = get_le(&p[0], 8);
  if (p[8] != 0) {
    g.cause = decode_abort(std::vector<std::uint8_t>(p.begin() + 9, p.end()));
    if (!g.cause) {
      return std::nullopt;
    }
  }
  return g;
}

std::vector<std::uint8_t> encode(const StatusReply& s) {
  std::vector<std::uint8_t> out;
  append_le(out, s.issued_seq, 8);
  append_le(out, s.running_seq, 8);
  return out;
}

std::optional<StatusReply> decode_status(const std::vector<std::uint8_t>& p) {
  if (p.size() < 16) {
    return std::nullopt;
  }
  return StatusReply{get_le(&p[0], 8), get_le(&p[8], 8)};
}

std::vector<std::uint8_t> encode_u64(std::uint64_t v) {
  std::vector<std::uint8_t> out;
  append_le(out, v, 8);
  return out;
}

std::optional<std::uint64_t> decode_u64(const std::vector<std::uint8_t>& p) {
  if (p.size() < 8) {
    return std::nullopt;
  }
  return get_le(p.data(), 8);
}

}  // namespace chorus::cpu
