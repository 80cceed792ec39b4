// SPDX-License-Identifier: BSD-3-Clause
// Socket fd ownership, options, and the single place where EINTR is retried.
#include "net/socket.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include <chorus/errors.hpp>

namespace chorus::net {

std::string errno_name(int err) {
  // strerrorname_np exists in glibc >= 2.32; Debian 12 ships 2.36.
  const char* name = strerrorname_np(err);
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));  // GNU variant returns the string
  if (name == nullptr) {
    return fmt::format("errno {} ({})", err, text);
  }
  return fmt::format("{} ({})", name, text);
}

std::string IoResult::describe() const {
  switch (status) {
    case Status::ok:
      return fmt::format("ok ({} bytes)", bytes);
    case Status::would_block:
      return "would block";
    case Status::closed:
      return "connection closed by peer";
    case Status::error:
      return errno_name(os_error);
    case Status::timed_out:
      return "timed out";
  }
  return "?";
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

Socket Socket::open(int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    ErrorContext ctx;
    ctx.op = "socket";
    ctx.os_error = err;
    const char* hint = (err == EMFILE || err == ENFILE)
                           ? "; raise the open file limit (ulimit -n) or close unused connections"
                           : "";
    throw NetworkError(fmt::format("socket() failed: {}{}", errno_name(err), hint), ctx);
  }
  return Socket(fd);
}

void Socket::close() noexcept {
  if (fd_ >= 0) {
    // close() is not retried on EINTR: on Linux the fd is released regardless.
    ::close(fd_);
    fd_ = -1;
  }
}

bool Socket::set_nonblocking(bool on) noexcept {
  const int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags < 0) {
    return false;
  }
  return ::fcntl(fd_, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)) == 0;
}

namespace {
bool set_int_option(int fd, int level, int name, int value) noexcept {
  return ::setsockopt(fd, level, name, &value, sizeof(value)) == 0;
}
}  // namespace

bool Socket::set_nodelay(bool on) noexcept {
  return set_int_option(fd_, IPPROTO_TCP, TCP_NODELAY, on ? 1 : 0);
}
bool Socket::set_keepalive(bool on) noexcept {
  return set_int_option(fd_, SOL_SOCKET, SO_KEEPALIVE, on ? 1 : 0);
}
bool Socket::set_dead_peer_timeout(Duration timeout) noexcept {
  if (timeout <= Duration::zero()) {
    return true;
  }
  // Keepalive counts in whole seconds: idle for half the bound, then probes until it is spent.
  const auto seconds =
      std::max<long long>(2, std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
  const int idle = static_cast<int>(seconds / 2);
  const int interval = static_cast<int>(std::max<long long>(1, seconds / 10));
  const int probes = std::max(1, static_cast<int>((seconds - idle) / interval));
  const auto user_ms = static_cast<unsigned>(std::min<long long>(timeout.count(), 1LL << 31));
  return set_keepalive(true) && set_int_option(fd_, IPPROTO_TCP, TCP_KEEPIDLE, idle) &&
         set_int_option(fd_, IPPROTO_TCP, TCP_KEEPINTVL, interval) &&
         set_int_option(fd_, IPPROTO_TCP, TCP_KEEPCNT, probes) &&
         ::setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) == 0;
}
bool Socket::set_send_buffer(int bytes) noexcept {
  return set_int_option(fd_, SOL_SOCKET, SO_SNDBUF, bytes);
}
bool Socket::set_recv_buffer(int bytes) noexcept {
  return set_int_option(fd_, SOL_SOCKET, SO_RCVBUF, bytes);
}

int Socket::take_error() noexcept {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return errno;
  }
  return err;
}

void Socket::shutdown_write() noexcept { ::shutdown(fd_, SHUT_WR); }

SocketAddress Socket::local_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return {};
  }
  return SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

SocketAddress Socket::peer_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return {};
  }
  return SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

namespace {

// The one EINTR loop: every socket syscall in chorus goes through here.
template <class Fn>
IoResult retry_io(Fn fn, bool is_read) noexcept {
  for (;;) {
    const ssize_t n = fn();
    if (n > 0) {
      return IoResult::done(static_cast<std::size_t>(n));
    }
    if (n == 0) {
      return is_read ? IoResult::eof() : IoResult::done(0);
    }
    const int err = errno;
    if (err == EINTR) {
      continue;
    }
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return IoResult::again();
    }
    return IoResult::fail(err);
  }
}

}  // namespace

IoResult Socket::read(void* data, std::size_t len) noexcept {
  if (len == 0) {
    return IoResult::done(0);
  }
  return retry_io([&] { return ::recv(fd_, data, len, 0); }, true);
}

IoResult Socket::write(const void* data, std::size_t len) noexcept {
  if (len == 0) {
    return IoResult::done(0);
  }
  return retry_io([&] { return ::send(fd_, data, len, MSG_NOSIGNAL); }, false);
}

IoResult Socket::readv(const iovec* iov, int count) noexcept {
  std::size_t total = 0;
  for (int i = 0; i < count; ++i) {
    total += iov[i].iov_len;
  }
  if (total == 0) {
    return IoResult::done(0);
  }
  return retry_io([&] { return ::readv(fd_, iov, std::min(count, IOV_MAX)); }, true);
}

IoResult Socket::writev(const iovec* iov, int count) noexcept {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<std::size_t>(std::min(count, IOV_MAX));
  return retry_io([&] { return ::sendmsg(fd_, &msg, MSG_NOSIGNAL); }, false);
}

int poll_until(int fd, short events, Deadline deadline) noexcept {
  for (;;) {
    int timeout_ms = -1;
    if (!deadline.is_never()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline.when() - Clock::now());
      if (left.count() <= 0) {
        timeout_ms = 0;
      } else {
        // Round up so that we never wake just before the deadline and spin.
        timeout_ms = static_cast<int>(std::min<long long>((left.count() + 999) / 1000, INT_MAX));
      }
    }
    pollfd pfd{fd, events, 0};
    const int rc = ::poll(&pfd, 1, timeout_ms);
    if (rc > 0) {
      return pfd.revents;
    }
    if (rc == 0) {
      if (timeout_ms == 0 || deadline.expired()) {
        return 0;
      }
      continue;
    }
    if (errno != EINTR) {
      return -errno;
    }
  }
}

namespace {

IoResult wait_ready(Socket& socket, short events, Deadline deadline, std::size_t done) noexcept {
  const int rc = poll_until(socket.fd(), events, deadline);
  if (rc == 0) {
    return IoResult::timeout(done);
  }
  if (rc < 0) {
    IoResult r = IoResult::fail(-rc);
    r.bytes = done;
    return r;
  }
  return IoResult::done(done);
}

}  // namespace

namespace {

// Moves exactly len bytes with `step` (one read or write), waiting for `event` between steps.
template <class Step>
IoResult transfer_all(Socket& socket, std::size_t len, short event, Deadline deadline,
                      Step step) noexcept {
  std::size_t done = 0;
  while (done < len) {
    IoResult r = step(done);
    if (r.ok()) {
      done += r.bytes;
      continue;
    }
    if (!r.would_block()) {
      r.bytes = done;
      return r;
    }
    IoResult w = wait_ready(socket, event, deadline, done);
    if (!w.ok()) {
      return w;
    }
  }
  return IoResult::done(done);
}

}  // namespace

IoResult send_all(Socket& socket, const void* data, std::size_t len, Deadline deadline) noexcept {
  const auto* p = static_cast<const std::uint8_t*>(data);
  return transfer_all(socket, len, POLLOUT, deadline,
                      [&](std::size_t done) { return socket.write(p + done, len - done); });
}

IoResult recv_exact(Socket& socket, void* data, std::size_t len, Deadline deadline) noexcept {
  auto* p = static_cast<std::uint8_t*>(data);
  return transfer_all(socket, len, POLLIN, deadline,
                      [&](std::size_t done) { return socket.read(p + done, len - done); });
}

IoResult recv_some(Socket& socket, void* data, std::size_t len, Deadline deadline) noexcept {
  for (;;) {
    IoResult r = socket.read(data, len);
    if (!r.would_block()) {
      return r;
    }
    IoResult w = wait_ready(socket, POLLIN, deadline, 0);
    if (!w.ok()) {
      return w;
    }
  }
}

}  // namespace chorus::net
