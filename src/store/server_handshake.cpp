// SPDX-License-Identifier: BSD-3-Clause
// ServerHandshake: hello and authentication of one store connection (see server_handshake.hpp).
#include "store/server_handshake.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "store/protocol.hpp"

namespace chorus::store {

ServerHandshake::Step ServerHandshake::advance(net::FrameReader& in, net::Socket& socket,
                                               net::OutputQueue& out, const std::string& token,
                                               std::string& why) {
  if (awaiting_auth_) {
    return read_proof(in, socket, out, token, why);
  }
  return read_hello(in, socket, out, token, why);
}

ServerHandshake::Step ServerHandshake::read_hello(net::FrameReader& in, net::Socket& socket,
                                                  net::OutputQueue& out, const std::string& token,
                                                  std::string& why) {
  if (in.buffered() < kHelloBytes) {
    return Step::need_more;
  }
  std::uint8_t raw[kHelloBytes];
  (void)in.take_raw(raw, kHelloBytes);
  const auto hello = decode_hello(raw);
  if (!hello) {
    why = fmt::format(
        "wrong magic '{}' (expected 'CHST'): not a chorus store client, or an incompatible one",
        printable_prefix(raw, kHelloBytes));
    return Step::refused;
  }
  std::uint8_t answer[kHelloBytes];
  if (hello->version != kProtocolVersion) {
    encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::unsupported_version)},
                 answer);
    (void)socket.write(answer, kHelloBytes);  // best effort: tell the client why
    why = fmt::format(
        "client speaks store protocol version {}, this server speaks {}; use the same chorus "
        "version on both sides",
        hello->version, kProtocolVersion);
    return Step::refused;
  }
  member_ = (hello->flags & kHelloFlagMember) != 0;
  if (!token.empty()) {
    // No key operation before the client proves it knows the token (read_proof).
    encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::auth_required)},
                 answer);
    challenge_ = random_nonce();
    std::vector<std::uint8_t> bytes(answer, answer + kHelloBytes);
    bytes.insert(bytes.end(), challenge_.begin(), challenge_.end());
    out.push(std::move(bytes));
    awaiting_auth_ = true;
    return Step::need_more;
  }
  encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::accepted)}, answer);
  out.push(std::vector<std::uint8_t>(answer, answer + kHelloBytes));
  return Step::done;
}

ServerHandshake::Step ServerHandshake::read_proof(net::FrameReader& in, net::Socket& socket,
                                                  net::OutputQueue& out, const std::string& token,
                                                  std::string& why) {
  if (in.buffered() < kAuthAnswerBytes) {
    return Step::need_more;
  }
  std::uint8_t answer[kAuthAnswerBytes];
  (void)in.take_raw(answer, kAuthAnswerBytes);
  Nonce theirs{};
  net::Mac proof{};
  std::copy(answer, answer + kNonceBytes, theirs.begin());
  std::copy(answer + kNonceBytes, answer + kAuthAnswerBytes, proof.begin());
  if (!net::equal_macs(proof, client_proof(token, challenge_, theirs))) {
    const std::uint8_t refused = 1;
    (void)socket.write(&refused, 1);  // best effort: tell the client why
    why =
        "authentication failed: the client's proof does not match this server's job token (a "
        "different CHORUS_STORE_TOKEN, or not a member of this job)";
    return Step::refused;
  }
  const net::Mac ours = server_proof(token, challenge_, theirs);
  std::vector<std::uint8_t> verdict{0};
  verdict.insert(verdict.end(), ours.begin(), ours.end());
  out.push(std::move(verdict));
  awaiting_auth_ = false;
  return Step::done;
}

}  // namespace chorus::store
