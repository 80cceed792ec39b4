// SPDX-License-Identifier: BSD-3-Clause
// Mesh setup: join the group's formation in the store (membership.cpp), then three phases
// that cannot wait on each other in a cycle:
//   1. connect to every higher rank and send our hello on each socket (the peer's listen
//      backlog completes the TCP handshake even before it calls accept);
//   2. accept every lower rank's sockets, verify their hellos, answer with ours
//      (hello_acceptor.cpp: all pending connections at once, strangers cost nothing);
//   3. read and verify the answers on the sockets we opened in phase 1, send our proofs;
//   4. read and verify the lower ranks' proofs on the sockets accepted in phase 2
//      (handshake.hpp: the membership proof).
// Every wait is bounded by the group's setup deadline; on expiry the error names the ranks
// that never published an address, never connected, or never answered.
#include "tcp/mesh.hpp"

#include <poll.h>

#include <cerrno>

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "net/connect.hpp"
#include "net/interfaces.hpp"
#include "net/listener.hpp"
#include "tcp/handshake.hpp"
#include "tcp/hello_acceptor.hpp"

namespace chorus::tcp {
namespace {

ErrorContext context(const MeshOptions& o, std::vector<int> peers) {
  ErrorContext c;
  c.rank = o.rank;
  c.size = o.size;
  c.group = o.group_name;
  c.op = "connect";
  c.peers = std::move(peers);
  c.timeout = o.timeout;
  return c;
}

std::string where(const MeshOptions& o) {
  return fmt::format("tcp group setup on rank {}/{} [{}]", o.rank, o.size, o.group_name);
}

[[noreturn]] void throw_gone(const MeshOptions& o, int peer, const std::string& address,
                             const std::string& message) {
  ErrorContext c = context(o, {peer});
  c.peer_address = address;
  c.os_error = ECONNREFUSED;
  throw NetworkError(fmt::format("{}: {}", where(o), message), c);
}

// The acceptor ticks every 250 ms; lower ranks that have not connected are probed every 4th.
constexpr int kTicksPerLivenessCheck = 4;
constexpr auto kLivenessProbeTimeout = std::chrono::milliseconds(500);

// A rank whose published address refuses connections: its listener is closed, so its process
// exited (or destroyed its group) after it joined the formation. Recorded in the store first,
// so that the other members name this rank rather than the ones that leave because of it.
[[noreturn]] void throw_exited(Store& store, const Mesh& mesh, const MeshOptions& o, int peer,
                               const std::string& address) {
  const std::string message = fmt::format(
      "rank {} published its address {} and then stopped listening (connection refused): its "
      "process exited or destroyed the group during setup; check rank {}'s log",
      peer, address, peer);
  record_gone(store, mesh.membership, peer, message);
  throw_gone(o, peer, address, message);
}

// Phases 1-3 over the formation's addresses.
void connect_mesh(Store& store, const MeshOptions& o, Mesh& mesh, int channels) {
  const int n = o.size;
  mesh.group_id = mesh.membership.group_id;
  mesh.peers.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    mesh.peers[static_cast<std::size_t>(r)].address =
        mesh.membership.addresses[static_cast<std::size_t>(r)];
  }

  // Phase 1: connect to higher ranks, hello and nonce on each socket.
  std::vector<std::vector<Open>> opens(static_cast<std::size_t>(n));  // what we sent, by peer
  for (int peer = o.rank + 1; peer < n; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    const net::HostPort hp = net::parse_host_port(link.address);
    for (int ch = 0; ch < channels; ++ch) {
      net::ConnectOptions co;
      co.what = fmt::format("rank {}", peer);
      const Open open =
          make_open({mesh.group_id, static_cast<std::uint32_t>(o.rank),
                     static_cast<std::uint32_t>(peer), static_cast<std::uint16_t>(ch),
                     static_cast<std::uint16_t>(channels), static_cast<std::uint32_t>(n)});
      opens[static_cast<std::size_t>(peer)].push_back(open);
      co.after_connect = [open](net::Socket& s, Deadline d) {
        const net::IoResult r = net::send_all(s, open.data(), open.size(), d);
        return r.ok() ? 0 : (r.os_error ? r.os_error : ECONNRESET);
      };
      co.refused_is_final = true;            // it listened before it published: refused means gone
      co.unanswered_limit = o.peer_timeout;  // and a host that answers nothing is gone too
      net::Socket s;
      try {
        s = net::connect(hp.host, hp.port, o.deadline, co);
      } catch (const NetworkError& e) {
        if (e.context().os_error == ETIMEDOUT) {
          throw NetworkError(
              fmt::format("{}: rank {} published its address {} but does not answer there: {}; "
                          "no reset came, so its host is down, unreachable, or drops packets "
                          "(peer timeout {}, CHORUS_PEER_TIMEOUT)",
                          where(o), peer, link.address, e.what(), format_duration(o.peer_timeout)),
              context(o, {peer}));
        }
        if (e.context().os_error != ECONNREFUSED) {
          throw;
        }
        throw_exited(store, mesh, o, peer, link.address);
      } catch (const TimeoutError& e) {
        throw TimeoutError(fmt::format("{}: could not connect to rank {} at {}: {}", where(o), peer,
                                       link.address, e.what()),
                           context(o, {peer}));
      }
      if (ch == 0) {
        link.control = std::move(s);
      } else {
        link.data.push_back(std::move(s));
      }
    }
  }

  // Phase 2: accept the lower ranks' sockets, all pending connections at once.
  AcceptOptions ao;
  ao.rank = o.rank;
  ao.size = n;
  ao.channels = static_cast<std::uint16_t>(channels);
  ao.group_id = mesh.group_id;
  ao.where = where(o);
  ao.group = o.group_name;
  ao.local_address = mesh.local_address;
  ao.timeout = o.timeout;
  ao.deadline = o.deadline;
  ao.hello_timeout = o.hello_timeout;
  ao.secret = mesh.membership.secret;
  int ticks = 0;
  ao.on_tick = [&](const std::vector<int>& missing) {
    check_no_clash(store, mesh.membership);
    if (auto gone = recorded_gone(store, mesh.membership);
        gone && gone->first >= 0 && gone->first < n) {
      throw_gone(o, gone->first, mesh.peers[static_cast<std::size_t>(gone->first)].address,
                 gone->second);
    }
    // About once a second: a lower rank that has not connected and whose published address
    // refuses connections has exited; say so now rather than at the timeout.
    if (++ticks % kTicksPerLivenessCheck != 0) {
      return;
    }
    for (int peer : missing) {
      const std::string& address = mesh.peers[static_cast<std::size_t>(peer)].address;
      if (!answers_at(address, mesh.group_id, o.rank, n,
                      earliest(o.deadline, Deadline::after(kLivenessProbeTimeout)))) {
        throw_exited(store, mesh, o, peer, address);
      }
    }
  };
  std::vector<std::vector<AcceptedLink>> incoming = accept_lower_ranks(mesh.listener, ao);

  // Phase 3: the answers of the higher ranks.
  for (int peer = o.rank + 1; peer < n; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    for (int ch = 0; ch < channels; ++ch) {
      net::Socket& s = ch == 0 ? link.control : link.data[static_cast<std::size_t>(ch - 1)];
      std::uint8_t buf[kAnswerBytes];
      const net::IoResult r = net::recv_exact(s, buf, sizeof(buf), o.deadline);
      if (r.timed_out()) {
        throw TimeoutError(
            fmt::format("{}: rank {} at {} accepted the connection but did not answer the "
                        "handshake within {}; it may be stuck: check its log",
                        where(o), peer, link.address, format_duration(o.timeout)),
            context(o, {peer}));
      }
      Hello h;
      const std::string bad = r.ok() ? check_hello(buf, mesh.group_id, o.rank, peer, n,
                                                   static_cast<std::uint16_t>(channels), h)
                                     : r.describe();
      if (bad.empty() && h.channel == kProbeChannel) {
        h.channel = 0xfffe;  // a probe is never an answer
      }
      if (!bad.empty() || h.channel != ch) {
        ErrorContext c = context(o, {peer});
        c.peer_address = link.address;
        throw NetworkError(
            fmt::format("{}: handshake with rank {} at {} failed: {}", where(o), peer, link.address,
                        bad.empty() ? "channel out of order" : bad),
            c);
      }
      const std::uint8_t* open =
          opens[static_cast<std::size_t>(peer)][static_cast<std::size_t>(ch)].data();
      net::Mac theirs{};
      std::copy(buf + kOpenBytes, buf + kAnswerBytes, theirs.begin());
      if (!net::equal_macs(theirs, accept_proof(mesh.membership.secret, open, buf))) {
        ErrorContext c = context(o, {peer});
        c.peer_address = link.address;
        throw NetworkError(
            fmt::format("{}: the process at {} answered as rank {} but cannot prove it belongs "
                        "to this group (wrong membership proof): not this formation's rank {} "
                        "(another job, or an impostor at that address)",
                        where(o), link.address, peer, peer),
            c);
      }
      const net::Mac mine = connect_proof(mesh.membership.secret, open, buf);
      if (!net::send_all(s, mine.data(), mine.size(), o.deadline).ok()) {
        ErrorContext c = context(o, {peer});
        c.peer_address = link.address;
        throw NetworkError(fmt::format("{}: rank {} at {} closed the connection during the "
                                       "handshake; check its log",
                                       where(o), peer, link.address),
                           c);
      }
    }
  }

  // Phase 4: the lower ranks' proofs, sent in their phase 3 (which never waits on our phase
  // 4, so this completes). A connection without a valid proof fails the setup naming it: its
  // rank's real connection was refused as a duplicate, or it is not a member at all.
  for (int peer = 0; peer < o.rank; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    auto& links = incoming[static_cast<std::size_t>(peer)];
    for (int ch = 0; ch < channels; ++ch) {
      AcceptedLink& a = links[static_cast<std::size_t>(ch)];
      net::Mac theirs{};
      const net::IoResult r = net::recv_exact(a.socket, theirs.data(), theirs.size(), o.deadline);
      if (!r.ok() || !net::equal_macs(theirs, a.expected_proof)) {
        ErrorContext c = context(o, {peer});
        c.peer_address = link.address;
        const std::string why =
            r.ok() ? "sent a wrong membership proof: not a member of this formation (a replayed "
                     "or forged handshake)"
                   : (r.timed_out() ? "sent no membership proof in time" : r.describe());
        auto error = fmt::format("{}: the connection from {} claiming to be rank {} {}", where(o),
                                 a.from, peer, why);
        if (r.timed_out()) {
          throw TimeoutError(error, c);
        }
        throw NetworkError(error, c);
      }
      if (ch == 0) {
        link.control = std::move(a.socket);
      } else {
        link.data.push_back(std::move(a.socket));
      }
    }
  }
  for (auto& link : mesh.peers) {
    if (link.control.valid()) {
      link.control.set_nodelay(true);
      for (auto& s : link.data) {
        s.set_nodelay(true);
      }
    }
  }
}

}  // namespace

Mesh build_mesh(Store& store, const MeshOptions& o) {
  const auto start = Clock::now();
  const int n = o.size;
  const int channels = o.sockets_per_peer + 1;
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
  mesh.listener = net::Listener::bind(local);
  mesh.local_address = mesh.listener.address().to_string();
  CHORUS_INFO(init, "{}: listening on {}", where(o), mesh.local_address);

  MembershipOptions mo;
  mo.rank = o.rank;
  mo.size = n;
  mo.where = where(o);
  mo.group = o.group_name;
  mo.timeout = o.timeout;
  mo.deadline = o.deadline;
  mo.local_address = mesh.local_address;
  mo.host_id = o.host_id;
  if (o.rank == 0) {
    // Nobody connects to rank 0 for the mesh (lower ranks connect to higher ones): what
    // arrives while it waits are the other ranks' liveness probes, and strangers.
    mo.between_slices = [&listener = mesh.listener] {
      while (listener.accept().io.ok()) {
      }
    };
  }
  mesh.membership = join_group(store, mo);
  try {
    connect_mesh(store, o, mesh, channels);
  } catch (const InvalidArgument&) {
    throw;  // a clash: its record stays for the ranks that have yet to see it
  } catch (...) {
    leave_group(store, mesh.membership, o.rank);
    throw;
  }
  CHORUS_INFO(init, "{}: connected to {} peers in {} ms", where(o), n - 1,
              std::chrono::duration_cast<Duration>(Clock::now() - start).count());
  return mesh;
}

}  // namespace chorus::tcp
