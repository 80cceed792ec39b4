// SPDX-License-Identifier: BSD-3-Clause
// Socket: an owning, move-only TCP socket fd; IoResult-returning read/write (EINTR retried here
// and nowhere else); errno formatting; deadline-bounded blocking helpers.
//
// Usage:
//   net::Socket s = net::Socket::open(AF_INET);            // non-blocking, CLOEXEC
//   s.set_nodelay(true);
//   net::IoResult r = s.write(buf, len);                    // never throws, never blocks
//   if (r.would_block()) { wait for EPOLLOUT } else if (!r.ok()) { r.describe() }
//   // Blocking with a deadline (client side):
//   net::IoResult r2 = net::send_all(s, buf, len, deadline);   // ok / timed_out / closed / error
//   net::IoResult r3 = net::recv_exact(s, out, n, deadline);
//   std::string why = net::errno_name(ECONNREFUSED);    // "ECONNREFUSED (Connection refused)"
#pragma once

#include "core/private.hpp"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/deadline.hpp>

#include "net/address.hpp"

namespace chorus::net {

// "ECONNREFUSED (Connection refused)"; "errno 1234 (...)" for unknown values.
std::string errno_name(int err);

// Outcome of one non-blocking I/O call. Not an exception: event loops branch on it.
struct [[nodiscard]] IoResult {
  enum class Status : std::uint8_t {
    ok,           // `bytes` transferred (> 0, or 0 for a zero-length request)
    would_block,  // EAGAIN: try again when the fd is ready
    closed,       // orderly EOF from the peer (read), or EPIPE/ECONNRESET seen as closed (never)
    error,        // os_error holds errno (ECONNRESET, EPIPE, ...)
    timed_out,    // only from the deadline helpers below
  };
  Status status = Status::ok;
  std::size_t bytes = 0;
  int os_error = 0;

  static IoResult done(std::size_t n) noexcept { return {Status::ok, n, 0}; }
  static IoResult again() noexcept { return {Status::would_block, 0, 0}; }
  static IoResult eof() noexcept { return {Status::closed, 0, 0}; }
  static IoResult fail(int err) noexcept { return {Status::error, 0, err}; }
  static IoResult timeout(std::size_t n = 0) noexcept { return {Status::timed_out, n, 0}; }

  bool ok() const noexcept { return status == Status::ok; }
  bool would_block() const noexcept { return status == Status::would_block; }
  bool closed() const noexcept { return status == Status::closed; }
  bool error() const noexcept { return status == Status::error; }
  bool timed_out() const noexcept { return status == Status::timed_out; }
  // "ok (12 bytes)", "connection closed by peer", "ECONNRESET (Connection reset by peer)".
  std::string describe() const;
};

// Owning TCP socket. Move-only; closes on destruction. Methods are not synchronized: one
// thread uses a socket at a time (the event loop thread, or a client holding its mutex).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // New non-blocking, close-on-exec stream socket. Throws NetworkError on failure (EMFILE...).
  static Socket open(int family);

  int fd() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close() noexcept;

  // Options. Each returns false (and leaves errno) on failure; callers treat them as hints.
  bool set_nonblocking(bool on) noexcept;
  bool set_nodelay(bool on) noexcept;
  bool set_keepalive(bool on) noexcept;
  // Makes the kernel give up on a peer that stops answering within about `timeout`: TCP
  // keepalive probes while the connection is idle (a reply we wait for that never comes) and
  // TCP_USER_TIMEOUT for data sent but not acknowledged. The socket then fails with
  // ETIMEDOUT. Zero: leaves the defaults (keepalive off; retransmissions for ~15 minutes).
  bool set_dead_peer_timeout(Duration timeout) noexcept;
  bool set_send_buffer(int bytes) noexcept;
  bool set_recv_buffer(int bytes) noexcept;
  // Pending SO_ERROR (e.g. the result of a non-blocking connect); 0 if none.
  int take_error() noexcept;
  // Half-close: the peer reads EOF after what was already sent.
  void shutdown_write() noexcept;

  SocketAddress local_address() const;  // empty address on failure
  SocketAddress peer_address() const;   // empty address on failure (e.g. not connected)

  // Non-blocking I/O (MSG_NOSIGNAL: a dead peer gives EPIPE, never SIGPIPE). EINTR is retried.
  IoResult read(void* data, std::size_t len) noexcept;
  IoResult write(const void* data, std::size_t len) noexcept;
  IoResult readv(const iovec* iov, int count) noexcept;
  IoResult writev(const iovec* iov, int count) noexcept;

 private:
  int fd_ = -1;
};

// poll() for `events` (POLLIN/POLLOUT) until deadline. Returns revents (> 0), 0 on timeout,
// -errno on failure. EINTR is retried with the remaining time.
int poll_until(int fd, short events, Deadline deadline) noexcept;

// Blocking helpers over a non-blocking socket, bounded by deadline. Return ok with the full
// byte count, or timed_out / closed / error with `bytes` = what was transferred before.
IoResult send_all(Socket& socket, const void* data, std::size_t len, Deadline deadline) noexcept;
IoResult recv_exact(Socket& socket, void* data, std::size_t len, Deadline deadline) noexcept;
// Reads at most len bytes, waiting until at least one is available or the deadline passes.
IoResult recv_some(Socket& socket, void* data, std::size_t len, Deadline deadline) noexcept;

}  // namespace chorus::net
