// SPDX-License-Identifier: BSD-3-Clause
// Transport: what the collective algorithms need from the wire, and nothing more.
//
// A transport gives every ordered pair of ranks a message stream (the collective channel).
// Messages from one rank to a peer leave in posting order and the i-th send to a peer is the
// i-th receive that peer posts for this rank, with the same length; algorithms are written so
// that both sides post in the same order (see schedule.hpp). Completion is reported by token
// to whoever drives the transport (the engine, or a test's loop over LoopbackTransports).
// Algorithms never include net/: socket_transport.hpp implements this over sockets, and
// tests/tcp/loopback_transport.hpp in memory.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>

namespace chorus::tcp {

class Transport {
 public:
  virtual ~Transport() = default;

  // Queues `bytes` from `data` for `peer`. `data` is borrowed until `token` completes.
  virtual void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) = 0;
  // Queues a receive of exactly `bytes` from `peer` into `data` (borrowed until completion).
  virtual void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) = 0;
};

}  // namespace chorus::tcp
