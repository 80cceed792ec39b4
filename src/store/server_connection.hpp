// SPDX-License-Identifier: BSD-3-Clause
// What the store server keeps per client connection (Server::Conn) and per parked request
// (Server::Parked): shared by the server's files (tcp_store_server.cpp: the loop and the
// connections; tcp_store_server_requests.cpp: what each request does), private to them.
#pragma once

#include "core/private.hpp"

#include <sys/epoll.h>

#include <deque>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "net/frame.hpp"
#include "net/socket.hpp"
#include "store/server_handshake.hpp"
#include "store/tcp_store_server.hpp"

namespace chorus::store {

// A reply estimate for requests whose reply is a status and a few integers.
inline constexpr std::size_t kSmallReply = 64;

// A get, multi_get or wait whose keys are missing: a watch in the table, with a timer that
// answers "timeout" at its deadline.
struct Server::Parked {
  std::uint64_t conn = 0;
  std::uint32_t request_id = 0;
  Op op = Op::get;
  std::vector<std::string> keys;
  net::EventLoop::TimerId timer = 0;
  std::size_t bytes = 0;  // memory it holds (keys), counted in its connection's budget
};

struct Server::Conn {
  explicit Conn(std::size_t max_frame) : in(max_frame) {}
  std::uint64_t id = 0;
  net::Socket socket;
  std::string peer;
  net::FrameReader in;
  net::OutputQueue out;
  ServerHandshake handshake;
  bool hello_done = false;   // handshake complete (authenticated, if the server has a token)
  bool did_request = false;  // sent at least one frame after its hello
  bool blocked = false;      // waiting for its replies to drain or for the global budget
  bool serve_scheduled = false;
  std::uint32_t interest = EPOLLIN;
  Clock::time_point accepted_at{};
  Clock::time_point last_input{};   // last byte received
  Clock::time_point last_output{};  // last byte sent, or when output started waiting
  std::size_t parked_bytes = 0;     // Parked::bytes of its watches and deferred deliveries
  std::size_t accounted = 0;        // its share of the MemoryBudget's total
  std::unordered_set<KvTable::WatchId> watches;
  std::unordered_set<std::uint64_t> client_waits;
  std::deque<std::unique_ptr<Parked>> deferred;  // ready replies waiting for budget

  std::size_t unread() const noexcept { return out.pending() + parked_bytes; }
  // Idle strangers are evicted first at the connection limit: no hello yet, or a hello and
  // nothing else (a port scanner, a health check, an attacker holding fds).
  bool idle_stranger() const noexcept {
    return !hello_done || (!did_request && watches.empty() && client_waits.empty() && out.empty() &&
                           deferred.empty() && !in.mid_frame());
  }
};

}  // namespace chorus::store
