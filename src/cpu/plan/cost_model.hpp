// SPDX-License-Identifier: BSD-3-Clause
// The α/β cost model the algorithm choice compares: what a message round and a byte cost on
// the links to each class of peer, as the group's transport stack prices them. Each transport
// measures its own figures on a host (LinkProbe), the host keeps them in its price list
// (PriceList, cached per host), the group agrees on one list at setup, and each layer of the
// stack prices the peer classes it serves from it (transport_stack.hpp). Every rank of a group
// holds the same figures, so that every rank picks the same algorithm.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::cpu {

// One link: a round (one message each way between two ranks, including the wake-up of the
// rank that waits for it) costs alpha_us; each byte that crosses it costs 1 / gbps ns.
struct LinkCost {
  double alpha_us = 0;
  double gbps = 1;  // GB/s (1e9 bytes per second)

  // Microseconds for `rounds` rounds that move `bytes` bytes through this link in total.
  double us(double rounds, double bytes) const noexcept {
    return rounds * alpha_us + bytes / (gbps * 1e3);
  }
};

// The classes of peer a rank's links reach.
enum class PeerClass : unsigned char {
  same_host,   // a rank of this host
  other_host,  // a rank of another host: across the network
};

// The figures the choice reads: one link per peer class, as the layer of the stack that serves
// that class priced it, and the host's copy and reduction rates.
struct LinkCosts {
  LinkCost same_host;
  LinkCost other_host;
  // The single-copy algorithms (direct.cpp): reads and writes between private buffers, and
  // memcpy between mapped SharedBuffers. Their rounds cost same_host's alpha_us.
  double peer_copy_gbps = 1;
  double memcpy_gbps = 1;
  // Reducing one buffer into another (float32 sum), by the bytes of one operand: what an
  // algorithm that does not pipeline its reductions with its transfers adds per byte.
  double reduce_gbps = 1;
  // CPUs of the host (rank 0's, for every host). Where a host runs more ranks than that, the
  // rank a round waits for is often not running: its rounds cost alpha_us x ranks / CPUs.
  double host_cpus = 1;

  LinkCost& operator[](PeerClass c) noexcept {
    return c == PeerClass::same_host ? same_host : other_host;
  }
  const LinkCost& operator[](PeerClass c) const noexcept {
    return c == PeerClass::same_host ? same_host : other_host;
  }
};

// What was measured for a group: each transport's figures under the name its probe gives them
// ("shm", "socket", ...; "network" between hosts), and the host's rates.
struct PriceList {
  std::map<std::string, LinkCost, std::less<>> links;
  double memcpy_gbps = 45.0;
  double reduce_gbps = 38.0;
  double host_cpus = 2;

  // The figures named `name`, else `fallback` (a list from before that transport existed).
  LinkCost link(std::string_view name, LinkCost fallback) const;
};

// The network between hosts in the price list: measured when a group forms, not on a host.
inline constexpr const char* kNetworkPriceName = "network";

// One figure a transport measures on a host, declared in its table entry
// (TransportLayer::probes): its name in the price list, its value where measuring is off or
// fails, and the probe. A probe is bounded (fixed iterations, every wait with a timeout) and
// returns nullopt where it cannot measure.
struct LinkProbe {
  std::string name;
  LinkCost fallback;
  std::function<std::optional<LinkCost>()> measure;
};

// The figures of a group whose stack was not priced (unit tests of the algorithms): shared
// memory on the host, 10 Gbit/s Ethernet between hosts.
LinkCosts default_link_costs() noexcept;

// The price list as one line of text ("v2 memcpy=<gbps> reduce=<gbps> cpus=<n>
// <name>=<alpha_us>/<gbps> ..."), and back (nullopt if malformed). Round-trips to the digit:
// every rank of a group parses the same line, so no figure differs in its last bit.
std::string format_prices(const PriceList& prices);
std::optional<PriceList> parse_prices(std::string_view text);

// The per-class figures as text, for logs and CHORUS_ALGO_SHOW.
std::string format_link_costs(const LinkCosts& costs);

}  // namespace chorus::cpu
