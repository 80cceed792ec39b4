// SPDX-License-Identifier: BSD-3-Clause
// The hello each end of a mesh connection sends: {magic, version, group id, src rank,
// dst rank, channel, world size}. Both ends verify it, so a connection from another job,
// another group or a confused rank is refused with a message instead of mixing streams.
// A liveness probe (membership.cpp) is a hello on channel kProbeChannel. Pure functions.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::tcp {

inline constexpr std::uint32_t kHelloMagic = 0x43544843;  // "CHTC"
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::uint16_t kProbeChannel = 0xffff;  // "are you alive?", then close
inline constexpr std::size_t kHelloBytes = 32;

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
// else the reason (for a log line or an error message). `expect_src` < 0 accepts any src
// below `my_rank` (the accepting side learns the peer from the hello). A probe (channel
// kProbeChannel) of this group is acceptable: the caller checks out.channel and closes it.
std::string check_hello(const std::uint8_t* bytes, std::uint64_t group_id, int my_rank,
                        int expect_src, int size, std::uint16_t channels, Hello& out);

}  // namespace chorus::tcp
