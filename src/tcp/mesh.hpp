// SPDX-License-Identifier: BSD-3-Clause
// The connection mesh of a group, built through the store: every rank listens on port 0 of
// the chosen local address and joins the group's formation in the store (membership.hpp);
// the lower rank of each pair connects (one control socket plus sockets_per_peer data
// sockets); both ends verify a hello (handshake.hpp); the accepting end verifies all pending
// connections at once (hello_acceptor.hpp).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "net/listener.hpp"
#include "net/socket.hpp"
#include "tcp/membership.hpp"

namespace chorus::tcp {

struct PeerLink {
  std::string address;            // "host:port" the peer listens on (for messages)
  net::Socket control;            // channel 0: control frames and tagged send/recv
  std::vector<net::Socket> data;  // channels 1..: the collective streams
};

struct Mesh {
  std::uint64_t group_id = 0;
  std::string local_address;    // this rank's "host:port"
  std::vector<PeerLink> peers;  // indexed by rank; this rank's entry is empty
  // The listening socket stays open for the group's life, never accepted from again: a live
  // group answers connections (membership probes), a dead one refuses them.
  net::Listener listener;
  Membership membership;  // what leave_group() removes from the store
};

struct MeshOptions {
  int rank = 0;
  int size = 1;
  int sockets_per_peer = 1;
  std::string interface;  // TcpGroupOptions::interface (empty: CHORUS_SOCKET_IFNAME, ...)
  std::string group_name;
  std::string host_id;  // published with the address (host_id.hpp)
  Duration timeout{0};
  Deadline deadline = Deadline::never();
  Duration hello_timeout = std::chrono::seconds(5);  // TcpGroupOptions::hello_timeout
  // A published peer whose address answers nothing for this long is named as gone (its host
  // is down) rather than waited for until the deadline. Zero: off.
  Duration peer_timeout = Duration::zero();
};

// Collective over the group. Blocks until every connection is up and verified, or throws:
// TimeoutError naming the ranks that never published an address or never connected (within
// the deadline), NetworkError for a bad address or a refused handshake, InvalidArgument for a
// clash (duplicate rank, different world size, another job's rank 0). On failure this rank's
// store records are removed again.
Mesh build_mesh(Store& store, const MeshOptions& options);

}  // namespace chorus::tcp
