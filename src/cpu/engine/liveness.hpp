// SPDX-License-Identifier: BSD-3-Clause
// Liveness: the engine's heartbeats and its watch for silent peers. Every quarter of the peer
// timeout it sends an empty heartbeat to each linked peer; a peer not heard from (any data or
// frame, as the transport notes) for the peer timeout is reported, so a peer that goes silent
// without a reset (host down, partition, stopped process) is named within the peer timeout
// rather than at an op's deadline.
//
// Separate from the engine because it runs on every loop iteration and must cost O(1) there:
// it keeps its own schedule (the next heartbeat, the earliest moment any peer could pass the
// timeout) and is otherwise unrelated to ops.
#pragma once

#include "core/private.hpp"

#include <optional>

#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

class Liveness {
 public:
  // peer_timeout zero or less: off (nothing is sent, nobody is judged).
  Liveness(int rank, int size, Duration peer_timeout);

  Duration peer_timeout() const noexcept { return peer_timeout_; }
  // When tend() next has something to do (never when off).
  Deadline deadline() const;

  struct Silent {
    int peer = -1;
    Duration silent{};  // how long it has not been heard from
  };
  // Sends due heartbeats; returns the first peer silent past the peer timeout, if any.
  std::optional<Silent> tend(EngineTransport& transport);

 private:
  int rank_;
  int size_;
  Duration peer_timeout_;
  Clock::time_point next_heartbeat_;      // a quarter of the peer timeout after the start
  Clock::time_point next_silence_check_;  // no peer can pass the peer timeout before this
};

}  // namespace chorus::cpu
