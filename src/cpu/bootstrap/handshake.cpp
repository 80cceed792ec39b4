// SPDX-License-Identifier: BSD-3-Clause
// Hello encoding (little-endian, fixed 32 bytes) and verification.
#include "cpu/bootstrap/handshake.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/bytes.hpp"

namespace chorus::cpu {

std::array<std::uint8_t, kHelloBytes> encode_hello(const Hello& h) noexcept {
  std::array<std::uint8_t, kHelloBytes> out{};
  put_le(&out[0], kHelloMagic, 4);
  put_le(&out[4], kProtocolVersion, 2);
  put_le(&out[6], h.channel, 2);
  put_le(&out[8], h.channels, 2);
  put_le(&out[12], h.src, 4);
  put_le(&out[16], h.dst, 4);
  put_le(&out[20], h.size, 4);
  put_le(&out[24], h.group_id, 8);
  return out;
}

Open make_open(const Hello& h) {
  Open out{};
  const auto hello = encode_hello(h);
  std::copy(hello.begin(), hello.end(), out.begin());
  net::random_bytes(std::span<std::uint8_t>(out.data() + kHelloBytes, kNonceBytes));
  return out;
}

namespace {
net::Mac proof(std::string_view label, const GroupSecret& secret, const std::uint8_t* open,
               const std::uint8_t* answer) {
  return net::hmac_sha256(
      secret, {net::as_bytes(label), std::span(open, kOpenBytes), std::span(answer, kOpenBytes)});
}
}  // namespace

net::Mac accept_proof(const GroupSecret& secret, const std::uint8_t* open,
                      const std::uint8_t* answer) {
  return proof("chorus-mesh/3 accept", secret, open, answer);
}

net::Mac connect_proof(const GroupSecret& secret, const std::uint8_t* open,
                       const std::uint8_t* answer) {
  return proof("chorus-mesh/3 connect", secret, open, answer);
}

std::string check_hello(const std::uint8_t* b, std::uint64_t group_id, int my_rank, int expect_src,
                        int size, std::uint16_t channels, Hello& out) {
  if (get_le(&b[0], 4) != kHelloMagic) {
    return "not a chorus tcp connection (bad magic)";
  }
  const auto version = static_cast<std::uint16_t>(get_le(&b[4], 2));
  if (version != kProtocolVersion) {
    return fmt::format(
        "protocol version {} but this build speaks {}; run the same chorus build everywhere",
        version, kProtocolVersion);
  }
  out.channel = static_cast<std::uint16_t>(get_le(&b[6], 2));
  out.channels = static_cast<std::uint16_t>(get_le(&b[8], 2));
  out.src = static_cast<std::uint32_t>(get_le(&b[12], 4));
  out.dst = static_cast<std::uint32_t>(get_le(&b[16], 4));
  out.size = static_cast<std::uint32_t>(get_le(&b[20], 4));
  out.group_id = get_le(&b[24], 8);
  if (out.group_id != group_id) {
    return fmt::format(
        "group id {:016x} but this group is {:016x} (a connection from another group or job)",
        out.group_id, group_id);
  }
  if (out.size != static_cast<std::uint32_t>(size)) {
    return fmt::format("from a rank with WORLD_SIZE={} but this rank has WORLD_SIZE={}", out.size,
                       size);
  }
  if (out.channel == kProbeChannel || out.channel == kCrossingChannel) {
    return {};
  }
  if (out.dst != static_cast<std::uint32_t>(my_rank)) {
    return fmt::format("meant for rank {} but this is rank {}", out.dst, my_rank);
  }
  if (out.src >= static_cast<std::uint32_t>(size) ||
      out.src == static_cast<std::uint32_t>(my_rank) ||
      (expect_src >= 0 && out.src != static_cast<std::uint32_t>(expect_src)) ||
      (expect_src < 0 && expect_src != kAnySource &&
       out.src > static_cast<std::uint32_t>(my_rank))) {
    return fmt::format("from rank {}, which should not connect here", out.src);
  }
  if (out.channels != channels || out.channel >= channels) {
    return fmt::format(
        "channel {}/{} but this group uses {} sockets per peer (sockets_per_peer differs between ranks)",
        out.channel, out.channels, channels);
  }
  return {};
}

}  // namespace chorus::cpu
