// SPDX-License-Identifier: BSD-3-Clause
// bind/listen/accept4 with errors that say what to do.
#include "net/listener.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include <fmt/format.h>

#include <chorus/errors.hpp>

namespace chorus::net {

Listener Listener::bind(const std::string& host, std::uint16_t port, const ListenOptions& options) {
  const std::string h = host.empty() ? "0.0.0.0" : host;
  const auto addrs = resolve(h, port, Deadline::after(std::chrono::seconds(30)));
  return bind(addrs.front(), options);
}

Listener Listener::bind(const SocketAddress& address, const ListenOptions& options) {
  Listener l;
  l.socket_ = Socket::open(address.family());
  const int fd = l.socket_.fd();
  const int one = 1;
  if (options.reuse_address) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (address.family() == AF_INET6) {
    const int v6only = options.dual_stack ? 0 : 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  }
  ErrorContext ctx;
  ctx.op = "listen";
  ctx.peer_address = address.to_string();
  if (::bind(fd, address.get(), address.length()) != 0) {
    const int err = errno;
    ctx.os_error = err;
    if (err == EADDRINUSE) {
      throw NetworkError(
          fmt::format("cannot listen on {}: port {} is already in use ({}); another chorus-store, "
                      "a previous run that is still alive, or another service holds it (see "
                      "`ss -ltnp 'sport = :{}'`); pick another port, or use port 0 to let the "
                      "system choose a free one",
                      address.to_string(), address.port(), errno_name(err), address.port()),
          ctx);
    }
    const char* hint = err == EADDRNOTAVAIL ? "; the address is not one of this host's addresses: "
                                              "check the host name or interface"
                       : err == EACCES ? "; ports below 1024 need privileges: use a port >= 1024"
                                       : "";
    throw NetworkError(
        fmt::format("cannot bind {}: {}{}", address.to_string(), errno_name(err), hint), ctx);
  }
  if (::listen(fd, options.backlog) != 0) {
    const int err = errno;
    ctx.os_error = err;
    throw NetworkError(
        fmt::format("listen() on {} failed: {}", address.to_string(), errno_name(err)), ctx);
  }
  l.address_ = l.socket_.local_address();
  if (l.address_.empty()) {
    l.address_ = address;
  }
  return l;
}

AcceptResult Listener::accept() noexcept {
  AcceptResult result;
  sockaddr_storage ss{};
  for (;;) {
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(socket_.fd(), reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      result.socket = Socket(fd);
      result.socket.set_nodelay(true);
      result.peer = SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
      result.io = IoResult::done(0);
      return result;
    }
    const int err = errno;
    if (err == EINTR) {
      continue;
    }
    result.io = (err == EAGAIN || err == EWOULDBLOCK) ? IoResult::again() : IoResult::fail(err);
    return result;
  }
}

}  // namespace chorus::net
