// SPDX-License-Identifier: BSD-3-Clause
// Mesh setup in three phases that cannot wait on each other in a cycle:
//   1. connect to every higher rank and send our hello on each socket (the peer's listen
//      backlog completes the TCP handshake even before it calls accept);
//   2. accept every lower rank's sockets, verify their hello, answer with ours;
//   3. read and verify the answers on the sockets we opened in phase 1.
// Every wait is bounded by the group's setup deadline; on expiry the error names the ranks
// that never published an address, never connected, or never answered.
#include "tcp/mesh.hpp"

#include <poll.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "net/connect.hpp"
#include "net/interfaces.hpp"
#include "net/listener.hpp"
#include "tcp/handshake.hpp"

namespace chorus::tcp {
namespace {

std::string addr_key(int rank) { return fmt::format("addr/{}", rank); }

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

std::uint64_t random_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;
}

}  // namespace

Mesh build_mesh(Store& store, const MeshOptions& o) {
  const auto start = Clock::now();
  const int n = o.size;
  const int channels = o.sockets_per_peer + 1;
  Mesh mesh;
  mesh.peers.resize(static_cast<std::size_t>(n));

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
  if (o.rank == 0) {
    store.set("group_id", fmt::format("{:016x}", random_id()));
  }
  store.set(addr_key(o.rank), mesh.local_address);
  CHORUS_INFO(init, "{}: listening on {}", where(o), mesh.local_address);

  std::vector<std::string> keys;
  keys.push_back("group_id");
  for (int r = 0; r < n; ++r) {
    keys.push_back(addr_key(r));
  }
  try {
    store.wait(keys, o.deadline.remaining());
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r) {
      if (!store.check({addr_key(r)})) {
        missing.push_back(r);
      }
    }
    throw TimeoutError(
        fmt::format("{}: ranks {} never showed up within {} (no address published in the store); "
                    "check that they were started with the same store and WORLD_SIZE={}, and their logs",
                    where(o), format_ranks(missing), format_duration(o.timeout), n),
        context(o, missing));
  }
  const std::vector<Bytes> values = store.multi_get(keys, o.deadline.remaining());
  mesh.group_id = std::stoull(to_string(values[0]), nullptr, 16);
  for (int r = 0; r < n; ++r) {
    mesh.peers[static_cast<std::size_t>(r)].address = to_string(values[static_cast<std::size_t>(r) + 1]);
  }

  // Phase 1: connect to higher ranks, hello on each socket.
  for (int peer = o.rank + 1; peer < n; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    const net::HostPort hp = net::parse_host_port(link.address);
    for (int ch = 0; ch < channels; ++ch) {
      net::ConnectOptions co;
      co.what = fmt::format("rank {}", peer);
      const auto hello = encode_hello({mesh.group_id, static_cast<std::uint32_t>(o.rank),
                                       static_cast<std::uint32_t>(peer), static_cast<std::uint16_t>(ch),
                                       static_cast<std::uint16_t>(channels)});
      co.after_connect = [hello](net::Socket& s, Deadline d) {
        const net::IoResult r = net::send_all(s, hello.data(), hello.size(), d);
        return r.ok() ? 0 : (r.os_error ? r.os_error : ECONNRESET);
      };
      net::Socket s;
      try {
        s = net::connect(hp.host, hp.port, o.deadline, co);
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

  // Phase 2: accept the lower ranks' sockets.
  std::vector<int> accepted(static_cast<std::size_t>(o.rank), 0);
  std::vector<std::vector<net::Socket>> incoming(static_cast<std::size_t>(o.rank));
  for (auto& v : incoming) {
    v.resize(static_cast<std::size_t>(channels));
  }
  int remaining = o.rank * channels;
  while (remaining > 0) {
    const int ev = net::poll_until(listener.fd(), POLLIN, o.deadline);
    if (ev == 0) {
      std::vector<int> missing;
      for (int r = 0; r < o.rank; ++r) {
        if (accepted[static_cast<std::size_t>(r)] < channels) {
          missing.push_back(r);
        }
      }
      throw TimeoutError(
          fmt::format("{}: ranks {} published their addresses but did not connect to {} within {}; "
                      "they may have died or be stuck: check their logs",
                      where(o), format_ranks(missing), mesh.local_address, format_duration(o.timeout)),
          context(o, missing));
    }
    net::AcceptResult a = listener.accept();
    if (!a.io.ok()) {
      continue;
    }
    std::uint8_t buf[kHelloBytes];
    const Deadline hello_deadline = earliest(o.deadline, Deadline::after(std::chrono::seconds(10)));
    const net::IoResult r = net::recv_exact(a.socket, buf, sizeof(buf), hello_deadline);
    Hello h;
    const std::string bad = r.ok() ? check_hello(buf, mesh.group_id, o.rank, -1, n,
                                                 static_cast<std::uint16_t>(channels), h)
                                   : "no hello: " + r.describe();
    if (!bad.empty()) {
      CHORUS_WARN(init, "{}: refused a connection from {}: {}", where(o), a.peer.to_string(), bad);
      continue;
    }
    auto& slot = incoming[h.src][h.channel];
    if (slot.valid()) {
      CHORUS_WARN(init, "{}: refused a duplicate connection from rank {} channel {}", where(o), h.src, h.channel);
      continue;
    }
    const auto reply = encode_hello({mesh.group_id, static_cast<std::uint32_t>(o.rank), h.src, h.channel,
                                     static_cast<std::uint16_t>(channels)});
    if (!net::send_all(a.socket, reply.data(), reply.size(), hello_deadline).ok()) {
      CHORUS_WARN(init, "{}: rank {} closed its connection during the handshake", where(o), h.src);
      continue;
    }
    slot = std::move(a.socket);
    ++accepted[h.src];
    --remaining;
  }
  for (int peer = 0; peer < o.rank; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    auto& socks = incoming[static_cast<std::size_t>(peer)];
    link.control = std::move(socks[0]);
    for (int ch = 1; ch < channels; ++ch) {
      link.data.push_back(std::move(socks[static_cast<std::size_t>(ch)]));
    }
  }

  // Phase 3: the answers of the higher ranks.
  for (int peer = o.rank + 1; peer < n; ++peer) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
    for (int ch = 0; ch < channels; ++ch) {
      net::Socket& s = ch == 0 ? link.control : link.data[static_cast<std::size_t>(ch - 1)];
      std::uint8_t buf[kHelloBytes];
      const net::IoResult r = net::recv_exact(s, buf, sizeof(buf), o.deadline);
      if (r.timed_out()) {
        throw TimeoutError(fmt::format("{}: rank {} at {} accepted the connection but did not answer the "
                                       "handshake within {}; it may be stuck: check its log",
                                       where(o), peer, link.address, format_duration(o.timeout)),
                           context(o, {peer}));
      }
      Hello h;
      const std::string bad = r.ok() ? check_hello(buf, mesh.group_id, o.rank, peer, n,
                                                   static_cast<std::uint16_t>(channels), h)
                                     : r.describe();
      if (!bad.empty() || h.channel != ch) {
        ErrorContext c = context(o, {peer});
        c.peer_address = link.address;
        throw NetworkError(fmt::format("{}: handshake with rank {} at {} failed: {}", where(o), peer,
                                       link.address, bad.empty() ? "channel out of order" : bad),
                           c);
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
  CHORUS_INFO(init, "{}: connected to {} peers in {} ms", where(o), n - 1,
              std::chrono::duration_cast<Duration>(Clock::now() - start).count());
  return mesh;
}

}  // namespace chorus::tcp
