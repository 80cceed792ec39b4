// SPDX-License-Identifier: BSD-3-Clause
// LinkConnector: dialing a peer (see link_connector.hpp). Reads the peer's address from the
// store, connects one socket per channel without blocking, sends each hello and nonce, checks
// the peer's answer and proof, and sends this rank's proof; a crossing hello abandons the dial.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "cpu/transports/socket/link_handshakes.hpp"
#include "net/connect.hpp"

namespace chorus::cpu {
namespace {

// A connect that failed transiently (net::retryable_connect_error) is retried this often until
// the peer timeout. A refusal is final: the peer listened before it published.
constexpr auto kConnectRetry = std::chrono::milliseconds(100);

}  // namespace

void LinkConnector::start_dial(int peer) {
  const auto up = static_cast<std::size_t>(peer);
  state_[up] = State::dialing;
  auto d = std::make_unique<Dial>();
  d->peer = peer;
  try {
    if (!fetch_addresses(store_, membership_, {peer}, Deadline::after(o_.timeout)).empty()) {
      fail(peer,
           fmt::format("rank {} left the group before this rank connected to it (it removed its "
                       "address from the store: it failed or destroyed the group); check rank "
                       "{}'s log",
                       peer, peer),
           ECONNRESET, false);
      return;
    }
  } catch (const Error& e) {
    fail(peer, fmt::format("could not read rank {}'s address from the store: {}", peer, e.what()),
         0, false);
    return;
  }
  d->address = membership_.addresses.at(peer);
  {
    std::lock_guard lock(mu_);
    addresses_[up] = d->address;
  }
  try {
    const net::HostPort hp = net::parse_host_port(d->address);
    d->target = net::resolve(hp.host, hp.port, Deadline::after(o_.timeout)).front();
  } catch (const Error& e) {
    fail(peer,
         fmt::format("rank {} published the address {}, which is unusable: {}", peer, d->address,
                     e.what()),
         0, false);
    return;
  }
  d->connect_deadline =
      Deadline::after(o_.peer_timeout > Duration::zero() ? o_.peer_timeout : o_.timeout);
  d->answer_deadline = Deadline::after(o_.timeout);
  d->conns.resize(static_cast<std::size_t>(o_.channels));
  dials_.push_back(std::move(d));
  Dial& dial = *dials_.back();
  for (int ch = 0; ch < o_.channels && !dial.dead; ++ch) {
    Dial::Conn& c = dial.conns[static_cast<std::size_t>(ch)];
    c.open =
        make_open({membership_.group_id, static_cast<std::uint32_t>(o_.rank),
                   static_cast<std::uint32_t>(peer), static_cast<std::uint16_t>(ch),
                   static_cast<std::uint16_t>(o_.channels), static_cast<std::uint32_t>(o_.size)});
    start_connect(dial, static_cast<std::size_t>(ch));
  }
}

// A non-blocking connect; its outcome is handled in step_dial (at once if it failed at once).
void LinkConnector::start_connect(Dial& d, std::size_t index) {
  Dial::Conn& c = d.conns[index];
  c.retry_at = Deadline::never();
  c.error = 0;
  try {
    c.sock = net::Socket::open(d.target.family());
  } catch (const Error& e) {
    fail(d.peer,
         fmt::format("could not open a socket to rank {}: {} (too many open files? raise the "
                     "open-file limit, or bound the links with CHORUS_MAX_PEER_SOCKETS)",
                     d.peer, e.what()),
         EMFILE, false);
    return;
  }
  int rc;
  do {
    rc = ::connect(c.sock.fd(), d.target.get(), d.target.length());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    c.error = errno;
    step_dial(d, index, 0);
  }
}

void LinkConnector::step_dial(Dial& d, std::size_t index, short revents) {
  Dial::Conn& c = d.conns[index];
  const int peer = d.peer;
  if (c.phase == Dial::Conn::Phase::connecting) {
    int err = c.error != 0 ? c.error : c.sock.take_error();
    if (err == 0 && (revents & (POLLERR | POLLHUP))) {
      err = ECONNRESET;
    }
    if (err == ECONNREFUSED) {
      const std::string message = fmt::format(
          "rank {} published its address {} and then stopped listening (connection refused): "
          "its process exited or destroyed the group; check rank {}'s log",
          peer, d.address, peer);
      record_gone(store_, membership_, peer, message);
      fail(peer, message, ECONNREFUSED, false);
      return;
    }
    if (err != 0 && net::retryable_connect_error(err) && !d.connect_deadline.expired()) {
      c.sock.close();  // and again after a pause (expire() restarts it)
      c.retry_at = Deadline::after(kConnectRetry);
      return;
    }
    if (err != 0) {
      fail(peer,
           fmt::format("could not connect to rank {} at {}: {}; check that its host is up and "
                       "reachable from this one (routes, firewall)",
                       peer, d.address, std::strerror(err)),
           err, false);
      return;
    }
    c.sock.set_nodelay(true);
    if (!write_whole(c.sock, c.open.data(), c.open.size())) {
      fail(peer,
           fmt::format("rank {} at {} closed the connection during the handshake", peer, d.address),
           ECONNRESET, false);
      return;
    }
    c.phase = Dial::Conn::Phase::answering;
    return;
  }
  const std::size_t want = c.got < kHelloBytes ? kHelloBytes : kAnswerBytes;
  const net::IoResult r = c.sock.read(c.answer.data() + c.got, want - c.got);
  if (r.would_block()) {
    return;
  }
  if (!r.ok()) {
    fail(peer,
         fmt::format("rank {} at {} closed the connection during the handshake ({}); check its log",
                     peer, d.address, r.closed() ? "closed" : r.describe()),
         r.os_error ? r.os_error : ECONNRESET, false);
    return;
  }
  c.got += r.bytes;
  if (c.got < kHelloBytes) {
    return;
  }
  Hello h;
  const std::string bad = check_hello(c.answer.data(), membership_.group_id, o_.rank, peer, o_.size,
                                      static_cast<std::uint16_t>(o_.channels), h);
  if (bad.empty() && h.channel == kCrossingChannel) {
    abandon_dial(peer);  // the lower rank dialed us at the same time: its link wins
    return;
  }
  if (!bad.empty() || h.channel != index) {
    fail(peer,
         fmt::format("handshake with rank {} at {} failed: {}", peer, d.address,
                     bad.empty() ? "channel out of order" : bad),
         0, false);
    return;
  }
  if (c.got < kAnswerBytes) {
    return;
  }
  net::Mac theirs{};
  std::copy(c.answer.begin() + kOpenBytes, c.answer.end(), theirs.begin());
  if (!net::equal_macs(theirs, accept_proof(membership_.secret, c.open.data(), c.answer.data()))) {
    fail(peer,
         fmt::format("the process at {} answered as rank {} but cannot prove it belongs to this "
                     "group (wrong membership proof): not this formation's rank {} (another job, "
                     "or an impostor at that address); if it is this job's rank {}, the ranks' "
                     "job tokens differ: give every rank the same CHORUS_STORE_TOKEN (or none)",
                     d.address, peer, peer, peer),
         0, false);
    return;
  }
  const net::Mac mine = connect_proof(membership_.secret, c.open.data(), c.answer.data());
  if (!write_whole(c.sock, mine.data(), mine.size())) {
    fail(peer,
         fmt::format("rank {} at {} closed the connection during the handshake", peer, d.address),
         ECONNRESET, false);
    return;
  }
  c.phase = Dial::Conn::Phase::done;
  if (std::all_of(d.conns.begin(), d.conns.end(),
                  [](const Dial::Conn& x) { return x.phase == Dial::Conn::Phase::done; })) {
    std::vector<net::Socket> sockets;
    for (auto& x : d.conns) {
      sockets.push_back(std::move(x.sock));
    }
    d.dead = true;
    deliver(peer, std::move(sockets));
  }
}

}  // namespace chorus::cpu
