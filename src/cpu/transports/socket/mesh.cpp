// SPDX-License-Identifier: BSD-3-Clause
// Group setup: listen, join the group's formation in the store (membership.cpp), start the
// LinkConnector, and wait until the links to the setup peers are verified. The lower rank of
// each setup pair dials, the higher one waits for it. Every wait is bounded by the group's setup
// deadline; on expiry the error names the ranks that never connected or never answered. While
// waiting, a rank looks once a tick for a departure another member recorded, and about once a
// second probes the lower setup peers that have not dialed yet: one whose listener refuses has
// exited, which is named at once rather than at the timeout.
#include "cpu/transports/socket/mesh.hpp"

#include <cerrno>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "cpu/bootstrap/group_key.hpp"
#include "net/address.hpp"
#include "net/interfaces.hpp"
#include "net/listener.hpp"

namespace chorus::cpu {
namespace {

ErrorContext context(const MeshOptions& o, std::vector<int> peers) {
  return setup_error_context(o.rank, o.size, o.group_name, o.timeout, std::move(peers));
}

std::string where(const MeshOptions& o) {
  return fmt::format("tcp group setup on rank {}/{} [{}]", o.rank, o.size, o.group_name);
}

// How often the setup wait looks for a recorded departure; lower setup peers that have not
// dialed yet are probed every kTicksPerLivenessCheck-th tick.
constexpr auto kTick = std::chrono::milliseconds(250);
constexpr int kTicksPerLivenessCheck = 4;
constexpr auto kLivenessProbeTimeout = std::chrono::milliseconds(500);

[[noreturn]] void throw_failure(const MeshOptions& o, const LinkFailure& f,
                                const std::string& address) {
  ErrorContext c = context(o, {f.peer});
  c.peer_address = address;
  c.os_error = f.os_error;
  const std::string message = fmt::format("{}: {}", where(o), f.message);
  if (f.timed_out) {
    throw TimeoutError(message, c);
  }
  throw NetworkError(message, c);
}

// A departure another member recorded (record_gone) fails this rank's setup naming that rank.
void throw_if_recorded_gone(Store& store, const MeshOptions& o, const Mesh& mesh) {
  if (auto gone = recorded_gone(store, mesh.membership);
      gone && gone->first >= 0 && gone->first < o.size) {
    ErrorContext c = context(o, {gone->first});
    c.os_error = ECONNREFUSED;
    throw NetworkError(fmt::format("{}: {}", where(o), gone->second), c);
  }
}

// Waits for the links to `peers` (dialing the higher ones); links to anyone else that arrive
// meanwhile are kept too.
void link_setup_peers(Store& store, const MeshOptions& o, Mesh& mesh,
                      const std::vector<int>& peers) {
  LinkConnector& connector = *mesh.connector;
  std::set<int> missing(peers.begin(), peers.end());
  for (int p : peers) {
    if (p > o.rank) {
      connector.request(p);
    }
  }
  int ticks = 0;
  while (!missing.empty()) {
    const Deadline tick = earliest(o.deadline, Deadline::after(kTick));
    connector.wait(tick);
    std::vector<NewLink> links;
    std::vector<LinkFailure> failures;
    connector.take(links, failures);
    for (NewLink& l : links) {
      PeerLink& link = mesh.peers[static_cast<std::size_t>(l.peer)];
      link.address = l.address;
      link.setup = std::find(peers.begin(), peers.end(), l.peer) != peers.end();
      link.control = std::move(l.sockets[0]);
      for (std::size_t i = 1; i < l.sockets.size(); ++i) {
        link.data.push_back(std::move(l.sockets[i]));
      }
      missing.erase(l.peer);
    }
    if (!failures.empty()) {
      const LinkFailure& f = failures.front();
      if (f.os_error == ECONNRESET) {
        // The peer reset a connection it had accepted: it died or left. Recorded (as a refusal
        // is, by the connector) so that the ranks that wait for it name it too, not this rank
        // once it leaves.
        record_gone(store, mesh.membership, f.peer,
                    fmt::format("{} (found by rank {})", f.message, o.rank));
      }
      throw_failure(o, f, connector.address_of(f.peer));
    }
    if (missing.empty()) {
      break;
    }
    throw_if_recorded_gone(store, o, mesh);
    if (o.deadline.expired()) {
      const std::vector<int> late(missing.begin(), missing.end());
      throw TimeoutError(
          fmt::format("{}: ranks {} published their addresses but did not connect to {} within "
                      "{}; they may have died or be stuck: check their logs",
                      where(o), format_ranks(late), mesh.local_address, format_duration(o.timeout)),
          context(o, late));
    }
    // About once a second: a lower setup peer that has not dialed and whose published address
    // refuses connections has exited; say so now rather than at the timeout.
    if (++ticks % kTicksPerLivenessCheck != 0) {
      continue;
    }
    std::vector<int> lower;
    for (int p : missing) {
      if (p < o.rank) {
        lower.push_back(p);
      }
    }
    if (lower.empty()) {
      continue;
    }
    const std::vector<int> left = fetch_addresses(store, mesh.membership, lower, o.deadline);
    for (int p : lower) {
      if (std::find(left.begin(), left.end(), p) != left.end()) {
        continue;
      }
      const std::string& address = mesh.membership.addresses.at(p);
      if (!answers_at(address, mesh.group_id, o.rank, o.size,
                      earliest(o.deadline, Deadline::after(kLivenessProbeTimeout)))) {
        const std::string message = fmt::format(
            "rank {} published its address {} and then stopped listening (connection refused): "
            "its process exited or destroyed the group during setup; check rank {}'s log",
            p, address, p);
        record_gone(store, mesh.membership, p, message);
        ErrorContext c = context(o, {p});
        c.peer_address = address;
        c.os_error = ECONNREFUSED;
        throw NetworkError(fmt::format("{}: {}", where(o), message), c);
      }
    }
    if (!left.empty()) {
      // A rank leaves during setup because it failed; if a peer's death was the cause, it
      // recorded that first, and that root cause is the one to name.
      throw_if_recorded_gone(store, o, mesh);
      const int p = left.front();
      const std::string message = fmt::format(
          "rank {} left the group during setup (it removed its address from the store: it "
          "failed or destroyed the group); check rank {}'s log",
          p, p);
      record_gone(store, mesh.membership, p, message);
      ErrorContext c = context(o, {p});
      c.os_error = ECONNRESET;
      throw NetworkError(fmt::format("{}: {}", where(o), message), c);
    }
  }
}

}  // namespace

std::vector<int> setup_peers(int rank, int size, const std::vector<std::string>& host_ids,
                             bool host_peers) {
  std::set<int> peers;
  if (size > 1) {
    peers.insert((rank + 1) % size);
    peers.insert((rank + size - 1) % size);
  }
  if (host_peers && static_cast<int>(host_ids.size()) == size) {
    const std::string& mine = host_ids[static_cast<std::size_t>(rank)];
    for (int r = 0; r < size; ++r) {
      if (host_ids[static_cast<std::size_t>(r)] == mine) {
        peers.insert(r);
      }
    }
  }
  peers.erase(rank);
  return {peers.begin(), peers.end()};
}

Mesh build_mesh(Store& store, const MeshOptions& o) {
  const auto start = Clock::now();
  const int n = o.size;
  Mesh mesh;

  // Listen on port 0 of the chosen address; publish what we actually got.
  // Without an explicit interface, use the address that routes to the store's host (through
  // any PrefixStore): a store on 127.0.0.1 keeps the whole group on loopback.
  std::optional<net::SocketAddress> remote;
  if (auto host = store.server_host()) {
    auto resolved = net::resolve(*host, 0, o.deadline);
    if (!resolved.empty()) {
      remote = resolved.front();
    }
  }
  const net::SocketAddress local = net::pick_local_address(o.interface, remote);
  net::Listener listener = net::Listener::bind(local);
  mesh.local_address = listener.address().to_string();
  CHORUS_INFO(init, "{}: listening on {}", where(o), mesh.local_address);

  MembershipOptions mo;
  mo.rank = o.rank;
  mo.size = n;
  mo.where = where(o);
  mo.group = o.group_name;
  mo.timeout = o.formation_bound > Duration::zero() ? o.formation_bound : o.timeout;
  mo.deadline = o.deadline;
  mo.give_up = o.give_up;
  mo.local_address = mesh.local_address;
  mo.host_id = o.host_id;
  // With a job token the membership secret derives from it and never enters the store, which
  // may be open to anyone (torch's TCPStore is): group_key.hpp.
  mo.token = group_token(store);
  if (n > 1) {
    mo.prefetch = {(o.rank + 1) % n, (o.rank + n - 1) % n};  // setup peers on any host map
  }
  if (o.rank == 0) {
    // What arrives while rank 0 waits are the other ranks' liveness probes, and strangers.
    mo.between_slices = [&listener] {
      while (listener.accept().io.ok()) {
      }
    };
  }
  mesh.membership = join_group(store, mo);
  mesh.group_id = mesh.membership.group_id;
  mesh.peers.resize(static_cast<std::size_t>(n));
  mesh.sockets_per_peer = o.sockets_per_peer;
  mesh.local_send_buffer = o.local_send_buffer;
  mesh.max_links = o.max_links;
  const std::vector<int> peers =
      setup_peers(o.rank, n, host_ids(mesh.membership), o.link_host_peers);
  try {
    LinkConnectorOptions co;
    co.rank = o.rank;
    co.size = n;
    co.channels = o.sockets_per_peer + 1;
    co.where = where(o);
    co.local_address = mesh.local_address;
    co.timeout = o.timeout;
    co.hello_timeout = o.hello_timeout;
    co.peer_timeout = o.peer_timeout;
    mesh.connector =
        std::make_unique<LinkConnector>(store, mesh.membership, std::move(listener), co);
    link_setup_peers(store, o, mesh, peers);
  } catch (const InvalidArgument&) {
    throw;  // a clash: its record stays for the ranks that have yet to see it
  } catch (...) {
    mesh.connector.reset();  // refuse connections from now on
    leave_group(store, mesh.membership, o.rank);
    throw;
  }
  CHORUS_INFO(init, "{}: linked to {} setup peers in {} ms", where(o), peers.size(),
              std::chrono::duration_cast<Duration>(Clock::now() - start).count());
  return mesh;
}

}  // namespace chorus::cpu
