// SPDX-License-Identifier: BSD-3-Clause
// The socket transport's connections of a group, built through the store: every rank listens
// on port 0 of the chosen local address and joins the group's formation in the store
// (bootstrap/membership.hpp). Setup links a rank only to the peers every group needs at once:
// its ring neighbours and the ranks of its host when they share memory (shm_segment.hpp sets
// that up over their control sockets). Every other link is made when an op first needs it, by
// the LinkConnector that setup starts and hands over with the mesh (link_connector.hpp).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "cpu/bootstrap/membership.hpp"
#include "cpu/transports/socket/link_connector.hpp"
#include "net/listener.hpp"
#include "net/socket.hpp"

namespace chorus::cpu {

struct PeerLink {
  std::string address;            // "host:port" the peer listens on (for messages)
  net::Socket control;            // channel 0: control frames and tagged send/recv
  std::vector<net::Socket> data;  // channels 1..: the collective streams
  bool setup = false;             // a setup peer's link (kept for the group's life)
};

struct Mesh {
  std::uint64_t group_id = 0;
  std::string local_address;    // this rank's "host:port"
  std::vector<PeerLink> peers;  // indexed by rank; empty where no link was made yet
  int sockets_per_peer = 1;     // data sockets per link
  int local_send_buffer = 0;    // TcpGroupOptions::local_send_buffer_bytes
  // CHORUS_MAX_PEER_SOCKETS as links (sockets / (1 + sockets_per_peer)); 0: no bound.
  std::size_t max_links = 0;
  // Owns the listening socket for the group's life (a live group answers connections,
  // membership probes among them; a dead one refuses them) and makes the other links.
  std::unique_ptr<LinkConnector> connector;
  Membership membership;  // what leave_group() removes from the store
};

struct MeshOptions {
  int rank = 0;
  int size = 1;
  int sockets_per_peer = 1;
  int local_send_buffer = 0;  // TcpGroupOptions::local_send_buffer_bytes
  std::string interface;      // TcpGroupOptions::interface (empty: CHORUS_SOCKET_IFNAME, ...)
  std::string group_name;
  std::string host_id;  // published with the address (host_id.hpp)
  Duration timeout{0};
  Deadline deadline = Deadline::never();
  // The bound the deadline was set from when it is not the group timeout (a grown or shrunk
  // group's join_timeout): what a formation that times out says it waited. Zero: `timeout`.
  Duration formation_bound{0};
  // MembershipOptions::give_up.
  std::function<std::string()> give_up;
  Duration hello_timeout = std::chrono::seconds(5);  // TcpGroupOptions::hello_timeout
  // A published peer whose address answers nothing for this long is named as gone (its host
  // is down) rather than waited for until the deadline. Zero: off.
  Duration peer_timeout = Duration::zero();
  // Link the ranks of this host at setup (their shared memory is set up over those links).
  bool link_host_peers = true;
  std::size_t max_links = 0;  // see Mesh::max_links
};

// The peers setup links to: ring neighbours, and the ranks sharing this rank's host when
// `host_peers` (by the formation's host ids). Symmetric: if a links to b, b links to a.
std::vector<int> setup_peers(int rank, int size, const std::vector<std::string>& host_ids,
                             bool host_peers);

// Collective over the group. Blocks until the setup links are up and verified, or throws:
// TimeoutError naming the ranks that never published an address or never connected (within
// the deadline), NetworkError for a bad address or a refused handshake, InvalidArgument for a
// clash (duplicate rank, different world size, another job's rank 0). On failure this rank's
// store records are removed again.
Mesh build_mesh(Store& store, const MeshOptions& options);

}  // namespace chorus::cpu
