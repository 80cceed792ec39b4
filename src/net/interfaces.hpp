// SPDX-License-Identifier: BSD-3-Clause
// Which local address should data sockets use: an explicit address, an interface name
// (CHORUS_SOCKET_IFNAME), or the address this host uses to reach a given remote.
//
// Usage:
//   auto ifs = net::list_interfaces();                        // every up interface address
//   net::SocketAddress a = net::pick_local_address("", store_addr);  // env, else route to store
//   net::SocketAddress b = net::pick_local_address("eth0", {});      // explicit name
//   net::SocketAddress c = net::pick_local_address("10.0.0.5", {});  // explicit literal
// Results carry port 0, ready for Listener::bind.
#pragma once

#include "core/private.hpp"

#include <optional>
#include <string>
#include <vector>

#include "net/address.hpp"

namespace chorus::net {

struct InterfaceAddress {
  std::string name;       // "eth0"
  SocketAddress address;  // port 0
  bool loopback = false;
  bool up = false;
};

// Every IPv4/IPv6 address of this host's interfaces (getifaddrs). Throws NetworkError if
// getifaddrs fails.
std::vector<InterfaceAddress> list_interfaces();

// The source address the kernel would use to reach `remote` (routing table), found by
// connecting a UDP socket: no packet is sent. nullopt if there is no route.
std::optional<SocketAddress> route_source_address(const SocketAddress& remote);

// Local address for data sockets. `spec` is an interface name or a literal address; empty means
// CHORUS_SOCKET_IFNAME if set, else the route source towards `remote`, else the first non-
// loopback up address, else 127.0.0.1. An interface named in spec/env that does not exist (or
// has no address) throws InvalidArgument listing the interfaces that do.
SocketAddress pick_local_address(const std::string& spec,
                                 const std::optional<SocketAddress>& remote);

}  // namespace chorus::net
