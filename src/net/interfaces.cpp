// SPDX-License-Identifier: BSD-3-Clause
// Local address selection: explicit, by interface name, or by route to a remote.
#include "net/interfaces.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "net/socket.hpp"

namespace chorus::net {

std::vector<InterfaceAddress> list_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    ErrorContext ctx;
    ctx.op = "getifaddrs";
    ctx.os_error = errno;
    throw NetworkError(fmt::format("cannot list network interfaces: {}", errno_name(errno)), ctx);
  }
  std::vector<InterfaceAddress> out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) {
      continue;
    }
    const int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) {
      continue;
    }
    InterfaceAddress ia;
    ia.name = it->ifa_name;
    ia.address = SocketAddress::from_sockaddr(
        it->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    ia.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    ia.up = (it->ifa_flags & IFF_UP) != 0;
    out.push_back(ia);
  }
  ::freeifaddrs(list);
  return out;
}

std::optional<SocketAddress> route_source_address(const SocketAddress& remote) {
  if (remote.empty()) {
    return std::nullopt;
  }
  const int fd = ::socket(remote.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return std::nullopt;
  }
  Socket guard(fd);
  SocketAddress target = remote;
  if (target.port() == 0) {
    target.set_port(9);  // any port: a UDP connect only consults the routing table
  }
  if (::connect(fd, target.get(), target.length()) != 0) {
    return std::nullopt;
  }
  SocketAddress local = guard.local_address();
  if (local.empty() || local.is_any()) {
    return std::nullopt;
  }
  local.set_port(0);
  return local;
}

SocketAddress pick_local_address(const std::string& spec,
                                 const std::optional<SocketAddress>& remote) {
  std::string wanted = spec;
  const char* source = "the interface option";
  if (wanted.empty()) {
    if (auto env_value = env::socket_ifname()) {
      wanted = *env_value;
      source = "CHORUS_SOCKET_IFNAME";
    }
  }
  if (!wanted.empty()) {
    if (auto literal = SocketAddress::parse_numeric(wanted, 0)) {
      return *literal;
    }
    const auto ifs = list_interfaces();
    // Prefer IPv4 on the named interface (link-local IPv6 needs a scope everywhere it is used).
    const InterfaceAddress* best = nullptr;
    for (const auto& ia : ifs) {
      if (ia.name == wanted && ia.up) {
        if (best == nullptr ||
            (best->address.family() != AF_INET && ia.address.family() == AF_INET)) {
          best = &ia;
        }
      }
    }
    if (best != nullptr) {
      return best->address;
    }
    std::string names;
    for (const auto& ia : ifs) {
      names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", ia.name, ia.address.host());
    }
    throw InvalidArgument(fmt::format(
        "{}='{}' is neither an address nor an interface that is up with an address; this host "
        "has: {}; set it to one of those",
        source, wanted, names.empty() ? "(none)" : names));
  }
  if (remote) {
    if (auto local = route_source_address(*remote)) {
      return *local;
    }
  }
  for (const auto& ia : list_interfaces()) {
    if (ia.up && !ia.loopback && ia.address.family() == AF_INET) {
      return ia.address;
    }
  }
  return *SocketAddress::parse_numeric("127.0.0.1", 0);
}

}  // namespace chorus::net
