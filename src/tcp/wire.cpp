// SPDX-License-Identifier: BSD-3-Clause
// Control frame encoding.
#include "tcp/wire.hpp"

namespace chorus::tcp {
namespace {

void put(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}
void put_at(std::uint8_t* p, std::uint64_t v, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}
std::uint64_t get(const std::uint8_t* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

}  // namespace

std::array<std::uint8_t, kFrameHeaderBytes> encode_header(const FrameHeader& h) noexcept {
  std::array<std::uint8_t, kFrameHeaderBytes> out{};
  put_at(&out[0], static_cast<std::uint32_t>(h.type), 4);
  put_at(&out[4], h.tag, 4);
  put_at(&out[8], h.length, 8);
  return out;
}

FrameHeader decode_header(const std::uint8_t* b) noexcept {
  return {static_cast<FrameType>(get(&b[0], 4)), static_cast<std::uint32_t>(get(&b[4], 4)), get(&b[8], 8)};
}

std::vector<std::uint8_t> encode(const AbortNotice& n) {
  std::vector<std::uint8_t> out;
  put(out, static_cast<std::uint32_t>(n.code), 4);
  put(out, n.seq, 8);
  put(out, n.peers.size(), 4);
  for (int p : n.peers) {
    put(out, static_cast<std::uint32_t>(p), 4);
  }
  out.insert(out.end(), n.message.begin(), n.message.end());
  return out;
}

std::optional<AbortNotice> decode_abort(const std::vector<std::uint8_t>& p) {
  if (p.size() < 16) {
    return std::nullopt;
  }
  AbortNotice n;
  n.code = static_cast<int>(get(&p[0], 4));
  n.seq = get(&p[4], 8);
  const std::uint64_t count = get(&p[12], 4);
  if (p.size() < 16 + count * 4) {
    return std::nullopt;
  }
  for (std::uint64_t i = 0; i < count; ++i) {
    n.peers.push_back(static_cast<int>(static_cast<std::uint32_t>(get(&p[16 + i * 4], 4))));
  }
  n.message.assign(p.begin() + static_cast<std::ptrdiff_t>(16 + count * 4), p.end());
  return n;
}

std::vector<std::uint8_t> encode(const StatusReply& s) {
  std::vector<std::uint8_t> out;
  put(out, s.issued_seq, 8);
  put(out, s.running_seq, 8);
  return out;
}

std::optional<StatusReply> decode_status(const std::vector<std::uint8_t>& p) {
  if (p.size() < 16) {
    return std::nullopt;
  }
  return StatusReply{get(&p[0], 8), get(&p[8], 8)};
}

std::vector<std::uint8_t> encode_u64(std::uint64_t v) {
  std::vector<std::uint8_t> out;
  put(out, v, 8);
  return out;
}

std::optional<std::uint64_t> decode_u64(const std::vector<std::uint8_t>& p) {
  if (p.size() < 8) {
    return std::nullopt;
  }
  return get(p.data(), 8);
}

}  // namespace chorus::tcp
