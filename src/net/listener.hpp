// SPDX-License-Identifier: BSD-3-Clause
// Listener: a bound, listening, non-blocking TCP socket. Port 0 picks a free port; "::" is
// dual-stack; "address in use" becomes a NetworkError that names the port and what to do.
//
// Usage:
//   net::Listener l = net::Listener::bind("127.0.0.1", 0);   // throws NetworkError
//   std::uint16_t port = l.port();
//   // when l.fd() is readable (epoll):
//   for (;;) { auto a = l.accept(); if (!a.io.ok()) break; use(std::move(a.socket), a.peer); }
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <string>

#include "net/address.hpp"
#include "net/socket.hpp"

namespace chorus::net {

struct ListenOptions {
  // Requested listen backlog; the kernel clamps it to net.core.somaxconn. A large backlog is
  // what lets thousands of ranks connect at the same instant without resets.
  int backlog = 8192;
  bool reuse_address = true;  // SO_REUSEADDR: rebind right after a restart (TIME_WAIT)
  bool dual_stack = true;     // for "::": accept IPv4 too (IPV6_V6ONLY off)
};

struct AcceptResult {
  IoResult io;    // ok, would_block (nothing pending) or error (EMFILE, ECONNABORTED...)
  Socket socket;  // non-blocking, CLOEXEC, TCP_NODELAY set; valid only if io.ok()
  SocketAddress peer;
};

class Listener {
 public:
  Listener() = default;
  // Binds host:port ("" or "0.0.0.0" for every IPv4 address, "::" for dual-stack) and listens.
  // host must be a literal or a resolvable name (resolved within 30 s). Throws NetworkError:
  // for EADDRINUSE the message names the port, says who may hold it, and suggests another port
  // or port 0.
  static Listener bind(const std::string& host, std::uint16_t port,
                       const ListenOptions& options = {});
  static Listener bind(const SocketAddress& address, const ListenOptions& options = {});

  int fd() const noexcept { return socket_.fd(); }
  bool valid() const noexcept { return socket_.valid(); }
  std::uint16_t port() const noexcept { return address_.port(); }
  const SocketAddress& address() const noexcept { return address_; }  // as bound (real port)

  // Accepts one pending connection without blocking. Not thread-safe (call from one thread).
  AcceptResult accept() noexcept;
  void close() noexcept { socket_.close(); }

 private:
  Socket socket_;
  SocketAddress address_;
};

}  // namespace chorus::net
