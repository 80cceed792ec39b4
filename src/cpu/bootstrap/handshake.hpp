// SPDX-License-Identifier: BSD-3-Clause
// The hello each end of a mesh connection sends: {magic, version, group id, src rank,
// dst rank, channel, world size}. Both ends verify it, so a connection from another job,
// another group or a confused rank is refused with a message instead of mixing streams.
// A liveness probe (membership.cpp) is a hello on channel kProbeChannel. Pure functions.
//
// Membership proof (3 messages; docs/architecture.md, "Connection mesh"): every formation has
// a 32-byte secret, derived from the job token and a random seed in the store when the job has
// a token, else the random bytes in the store themselves (group_key.hpp, membership.hpp). The
// connecting end sends its hello and a fresh nonce ("open"); the accepting end answers with its
// hello, its own nonce and a proof (HMAC of the secret over both); the connecting end checks it
// and sends its own proof, which the accepting end checks before the socket carries anything.
// Without the secret a stranger can neither join a group nor pose as one of its ranks, and a
// captured handshake cannot be replayed (the other side's nonce is fresh).
#pragma once

#include "core/private.hpp"

#include "net/hmac.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::cpu {

inline constexpr std::uint32_t kHelloMagic = 0x43544843;  // "CHTC"
// 4: data streams 64-byte aligned; 5: op signatures v2 (kinds are OpType values, coalesced
// ops carry their number of tensors); 6: a wire message carries its slice's scale word before
// the elements (core/wire.hpp); 7: ring neighbours on different hosts time their link after
// the mesh forms (transports/socket/network_probe.hpp). A mixed job fails at the hello, not
// mid-op or mid-probe.
inline constexpr std::uint16_t kProtocolVersion = 7;
inline constexpr std::uint16_t kProbeChannel = 0xffff;  // "are you alive?", then close
// The answer to a dial that crossed the answering (lower) rank's own dial: "use mine".
inline constexpr std::uint16_t kCrossingChannel = 0xfffe;
// check_hello's expect_src for an end that accepts a link from any other rank.
inline constexpr int kAnySource = -2;
inline constexpr std::size_t kHelloBytes = 32;
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kOpenBytes = kHelloBytes + kNonceBytes;      // connecting end
inline constexpr std::size_t kAnswerBytes = kOpenBytes + net::kMacBytes;  // accepting end
inline constexpr std::size_t kSecretBytes = 32;
using GroupSecret = std::array<std::uint8_t, kSecretBytes>;
using Open = std::array<std::uint8_t, kOpenBytes>;

struct Hello {
  std::uint64_t group_id = 0;
  std::uint32_t src = 0;       // sender's rank
  std::uint32_t dst = 0;       // rank the sender believes it talks to
  std::uint16_t channel = 0;   // 0 = control, 1.. = data sockets
  std::uint16_t channels = 0;  // sockets per peer pair (control + data), must agree
  std::uint32_t size = 0;      // the sender's world size, must agree
};

std::array<std::uint8_t, kHelloBytes> encode_hello(const Hello& h) noexcept;

// Checks a received hello against what this end expects; returns "" if it is acceptable,
// else the reason (for a log line or an error message). `expect_src` kAnySource accepts any
// other rank, another negative value any src below `my_rank` (the accepting side learns the
// peer from the hello). A probe (channel kProbeChannel) or a crossing answer
// (kCrossingChannel) of this group is acceptable: the caller checks out.channel.
std::string check_hello(const std::uint8_t* bytes, std::uint64_t group_id, int my_rank,
                        int expect_src, int size, std::uint16_t channels, Hello& out);

// The connecting end's first message: its hello and a fresh nonce.
Open make_open(const Hello& h);
// The proofs over one exchange: `open` as sent by the connecting end, `answer` the first
// kOpenBytes of the accepting end's answer (its hello and nonce).
net::Mac accept_proof(const GroupSecret& secret, const std::uint8_t* open,
                      const std::uint8_t* answer);
net::Mac connect_proof(const GroupSecret& secret, const std::uint8_t* open,
                       const std::uint8_t* answer);

}  // namespace chorus::cpu
