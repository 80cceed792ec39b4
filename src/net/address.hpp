// SPDX-License-Identifier: BSD-3-Clause
// SocketAddress (IPv4/IPv6), "host:port" parsing and name resolution bounded by a Deadline.
//
// Usage:
//   auto hp = net::parse_host_port("[::1]:29500");          // {host "::1", port 29500}
//   auto addrs = net::resolve(hp.host, hp.port, Deadline::after(5s));  // throws on failure
//   net::SocketAddress a = addrs.front();  a.to_string() == "[::1]:29500"
//   auto lit = net::SocketAddress::parse_numeric("127.0.0.1", 0);      // no DNS, nullopt if not a
//   literal
#pragma once

#include "core/private.hpp"

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/deadline.hpp>

namespace chorus::net {

// A value type holding a sockaddr_in or sockaddr_in6. Default-constructed: empty (family 0).
class SocketAddress {
 public:
  SocketAddress() = default;
  // Copies `len` bytes of an AF_INET/AF_INET6 sockaddr; other families give an empty address.
  static SocketAddress from_sockaddr(const sockaddr* sa, socklen_t len) noexcept;
  // Numeric literal only ("10.0.0.1", "::1", "fe80::1%eth0"); nullopt for names. Never blocks.
  static std::optional<SocketAddress> parse_numeric(const std::string& host, std::uint16_t port);
  // The wildcard address of a family ("0.0.0.0" / "::") with the given port.
  static SocketAddress any(int family, std::uint16_t port) noexcept;

  bool empty() const noexcept { return len_ == 0; }
  int family() const noexcept;  // AF_INET, AF_INET6, or 0 when empty
  std::uint16_t port() const noexcept;
  void set_port(std::uint16_t port) noexcept;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const noexcept { return len_; }

  // "127.0.0.1" or "::1" (no brackets, no port).
  std::string host() const;
  // "127.0.0.1:29500" or "[::1]:29500".
  std::string to_string() const;
  bool is_loopback() const noexcept;
  bool is_any() const noexcept;  // 0.0.0.0 or ::

  friend bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept;

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

struct HostPort {
  std::string host;  // without brackets
  std::uint16_t port = 0;
};

// Parses "host:port", "1.2.3.4:port" or "[v6]:port". Throws InvalidArgument (naming the text
// and the expected forms) when the port is missing or not in 0..65535.
HostPort parse_host_port(std::string_view text);
// "host:port", with brackets around an IPv6 host.
std::string format_host_port(std::string_view host, std::uint16_t port);

// Resolves host (a name or a literal) to stream-socket addresses, IPv4 first. Literals never
// block. Names are resolved by getaddrinfo on a helper thread so the caller waits at most until
// `deadline`: past it, throws TimeoutError; an unknown name throws NetworkError naming it.
// `family` restricts the result (AF_INET/AF_INET6), AF_UNSPEC for both. Thread-safe.
std::vector<SocketAddress> resolve(const std::string& host, std::uint16_t port, Deadline deadline,
                                   int family = AF_UNSPEC);

}  // namespace chorus::net
