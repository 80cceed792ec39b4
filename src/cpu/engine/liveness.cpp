// SPDX-License-Identifier: BSD-3-Clause
// Liveness: heartbeats and the silent-peer watch (see liveness.hpp).
#include "cpu/engine/liveness.hpp"

#include <algorithm>

namespace chorus::cpu {

Liveness::Liveness(int rank, int size, Duration peer_timeout)
    : rank_(rank), size_(size), peer_timeout_(peer_timeout) {
  // Not at once: the mesh's setup was just heard from everyone, and a short-lived group
  // (created, one op, destroyed) then sends no heartbeat at all.
  next_heartbeat_ = Clock::now() + peer_timeout_ / 4;
  next_silence_check_ = Clock::now() + peer_timeout_;
}

Deadline Liveness::deadline() const {
  if (peer_timeout_ <= Duration::zero()) {
    return Deadline::never();
  }
  return Deadline::at(std::min(next_heartbeat_, next_silence_check_));
}

std::optional<Liveness::Silent> Liveness::tend(EngineTransport& transport) {
  if (peer_timeout_ <= Duration::zero()) {
    return std::nullopt;
  }
  const Clock::time_point now = Clock::now();
  if (now >= next_heartbeat_) {
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && transport.peer_connected(p)) {
        transport.send_control(p, FrameType::heartbeat, {});
      }
    }
    next_heartbeat_ = now + peer_timeout_ / 4;
  }
  // The peers are scanned only when the earliest of them could have gone silent: last-heard
  // times only move forward, so no peer passes the timeout before next_silence_check_.
  if (now < next_silence_check_) {
    return std::nullopt;
  }
  Clock::time_point earliest_silence = now + peer_timeout_;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      continue;
    }
    const auto heard = transport.last_heard(p);
    if (!heard) {
      continue;
    }
    if (now - *heard <= peer_timeout_) {
      earliest_silence = std::min(earliest_silence, *heard + peer_timeout_);
      continue;
    }
    return Silent{p, std::chrono::duration_cast<Duration>(now - *heard)};
  }
  next_silence_check_ = earliest_silence + std::chrono::milliseconds(1);
  return std::nullopt;
}

}  // namespace chorus::cpu
