// SPDX-License-Identifier: BSD-3-Clause
// Connect with exponential backoff and jitter until a Deadline: the server may start after the
// client, or be flooded by thousands of ranks connecting at once.
//
// Usage:
//   net::Socket s = net::connect("10.0.0.7", 29500, Deadline::after(30s));  // TCP_NODELAY,
//   non-blocking
//   // With an application handshake retried as part of the attempt (a reset during the
//   // handshake — a full listen backlog — is retried like a refused connect):
//   net::ConnectOptions o;  o.what = "store";
//   o.after_connect = [](net::Socket& s, Deadline d) { return do_hello(s, d); };  // 0 or errno
//   net::Socket s2 = net::connect(host, port, deadline, o);
// On failure: TimeoutError (deadline passed; message names host:port, time waited, attempts and
// last OS error) or NetworkError (permanent: unknown host, address family unsupported).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <functional>
#include <string>

#include <chorus/deadline.hpp>

#include "net/address.hpp"
#include "net/socket.hpp"

namespace chorus::net {

struct ConnectOptions {
  std::string what = "server";  // "store", "rank 3": used in messages
  Duration initial_backoff = std::chrono::milliseconds(10);
  Duration max_backoff = std::chrono::milliseconds(1000);
  // Runs on each freshly connected socket; returns 0 on success or an errno-like code to close
  // the socket and retry (ECONNRESET, ETIMEDOUT...). Exceptions it throws propagate (no retry).
  std::function<int(Socket&, Deadline)> after_connect;
  // Optional local address to bind before connecting (interface selection); port usually 0.
  SocketAddress local;
  // The peer was listening before we learned its address (a rank's published address): a
  // refused connect means it is gone, so fail at once (NetworkError, os_error ECONNREFUSED)
  // instead of retrying until the deadline.
  bool refused_is_final = false;
  // The same kind of peer: when no attempt got any answer at all (no accept, no refusal) for
  // this long, its host is down or unreachable: NetworkError with os_error ETIMEDOUT (no other
  // failure raises that combination), instead of retrying until the deadline. Zero: no limit.
  Duration unanswered_limit = Duration::zero();
};

// Errors after which a connect may succeed if tried again (server not up yet, backlog full,
// no route yet, ports or descriptors short for a moment).
bool retryable_connect_error(int err);

// One non-blocking connect attempt bounded by deadline: returns 0 and a connected socket, or the
// errno that made it fail (ETIMEDOUT when the deadline passed).
int connect_once(const SocketAddress& address, Deadline deadline, Socket& out,
                 const SocketAddress& local = {}) noexcept;

// Retries until connected or deadline. Resolves host (names too) within the deadline, tries
// each address in turn. Thread-safe (no shared state).
Socket connect(const std::string& host, std::uint16_t port, Deadline deadline,
               const ConnectOptions& options = {});
Socket connect(const SocketAddress& address, Deadline deadline, const ConnectOptions& options = {});

}  // namespace chorus::net
