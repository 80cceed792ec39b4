// SPDX-License-Identifier: BSD-3-Clause
// Concurrent accept-and-verify for mesh setup (see hello_acceptor.hpp).
#include "tcp/hello_acceptor.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <deque>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "tcp/handshake.hpp"

namespace chorus::tcp {
namespace {

// An accepted socket whose hello is not complete yet.
struct Pending {
  net::Socket socket;
  std::string from;  // peer "host:port", for messages
  Open open{};       // hello + nonce
  std::size_t got = 0;
  Deadline deadline = Deadline::never();
  bool done = false;  // kept, answered or dropped: remove from the pending list
};

// Connections waiting for their hello beyond the ranks we expect: the oldest is dropped first,
// so a flood of strangers costs bounded memory and descriptors.
constexpr std::size_t kSpareConnections = 256;

class Acceptor {
 public:
  Acceptor(net::Listener& listener, const AcceptOptions& o)
      : listener_(listener), o_(o), incoming_(static_cast<std::size_t>(o.rank)) {
    for (auto& v : incoming_) {
      v.resize(o.channels);
    }
    remaining_ = o.rank * o.channels;
  }

  std::vector<std::vector<AcceptedLink>> run() {
    Deadline next_tick = Deadline::after(o_.tick);
    while (remaining_ > 0) {
      if (o_.deadline.expired()) {
        throw_timeout();
      }
      Deadline wake = earliest(o_.deadline, next_tick);
      for (const Pending& p : pending_) {
        wake = earliest(wake, p.deadline);
      }
      poll_once(wake);
      expire_silent();
      if (next_tick.expired()) {
        if (o_.on_tick) {
          o_.on_tick(missing_ranks());
        }
        next_tick = Deadline::after(o_.tick);
      }
    }
    if (!pending_.empty()) {
      CHORUS_WARN(
          init,
          "{}: closed {} connection(s) that had not sent a hello when every rank was connected",
          o_.where, pending_.size());
    }
    return std::move(incoming_);
  }

 private:
  void poll_once(Deadline wake) {
    std::vector<pollfd> fds;
    fds.reserve(pending_.size() + 1);
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const Pending& p : pending_) {
      fds.push_back({p.socket.fd(), POLLIN, 0});
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(wake.remaining()).count();
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left, 0, 60'000)));
    if (n <= 0) {
      return;  // timeout, or EINTR: the caller's loop re-checks its deadlines
    }
    // Read hellos first (indices refer to pending_ as polled), then accept new connections.
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (fds[i + 1].revents != 0) {
        pending_[i].done = read_hello(pending_[i]);
      }
    }
    std::erase_if(pending_, [](const Pending& p) { return p.done; });
    if (fds[0].revents & POLLIN) {
      accept_all();
    }
  }

  void accept_all() {
    for (;;) {
      net::AcceptResult a = listener_.accept();
      if (!a.io.ok()) {
        if (!a.io.would_block()) {
          CHORUS_WARN(init, "{}: accept on {} failed: {}", o_.where, o_.local_address,
                      a.io.describe());
        }
        return;
      }
      if (pending_.size() >= static_cast<std::size_t>(remaining_) + kSpareConnections) {
        CHORUS_WARN(
            init,
            "{}: dropped a connection from {} that had sent no hello, to make room ({} pending)",
            o_.where, pending_.front().from, pending_.size());
        pending_.pop_front();
      }
      Pending p;
      p.socket = std::move(a.socket);
      p.from = a.peer.to_string();
      p.deadline = earliest(o_.deadline, Deadline::after(o_.hello_timeout));
      pending_.push_back(std::move(p));
    }
  }

  // Reads what has arrived; true when the connection is done with (kept, answered or dropped).
  bool read_hello(Pending& p) {
    // A probe is a bare hello: read the hello first, the nonce only from a real connection.
    const std::size_t want = p.got < kHelloBytes ? kHelloBytes : kOpenBytes;
    const net::IoResult r = p.socket.read(p.open.data() + p.got, want - p.got);
    if (r.would_block()) {
      return false;
    }
    if (!r.ok()) {
      CHORUS_WARN(init, "{}: dropped a connection from {}: {} after {} of the {} handshake bytes",
                  o_.where, p.from, r.closed() ? "closed" : r.describe(), p.got, kOpenBytes);
      return true;
    }
    p.got += r.bytes;
    if (p.got < kHelloBytes) {
      return false;
    }
    Hello h;
    const std::string bad =
        check_hello(p.open.data(), o_.group_id, o_.rank, -1, o_.size, o_.channels, h);
    if (!bad.empty()) {
      CHORUS_WARN(init, "{}: refused a connection from {}: {}", o_.where, p.from, bad);
      return true;
    }
    if (h.channel == kProbeChannel) {
      return true;  // a rank checking that we are alive (membership.cpp)
    }
    if (p.got < kOpenBytes) {
      return false;
    }
    AcceptedLink& slot = incoming_[h.src][h.channel];
    if (slot.socket.valid()) {
      CHORUS_WARN(init, "{}: refused a second connection from {} claiming rank {} channel {}",
                  o_.where, p.from, h.src, h.channel);
      return true;
    }
    const Open mine = make_open({o_.group_id, static_cast<std::uint32_t>(o_.rank), h.src, h.channel,
                                 o_.channels, static_cast<std::uint32_t>(o_.size)});
    const net::Mac proof = accept_proof(o_.secret, p.open.data(), mine.data());
    std::array<std::uint8_t, kAnswerBytes> answer{};
    std::copy(mine.begin(), mine.end(), answer.begin());
    std::copy(proof.begin(), proof.end(), answer.begin() + kOpenBytes);
    // A fresh socket's send buffer takes the 80 bytes at once; the deadline only bounds a peer
    // that vanished.
    if (!net::send_all(p.socket, answer.data(), answer.size(), p.deadline).ok()) {
      CHORUS_WARN(init, "{}: rank {} ({}) closed its connection during the handshake", o_.where,
                  h.src, p.from);
      return true;
    }
    slot.expected_proof = connect_proof(o_.secret, p.open.data(), mine.data());
    slot.from = p.from;
    slot.socket = std::move(p.socket);
    --remaining_;
    return true;
  }

  void expire_silent() {
    std::erase_if(pending_, [&](const Pending& p) {
      if (!p.deadline.expired()) {
        return false;
      }
      CHORUS_WARN(init,
                  "{}: dropped a connection from {}: sent {} of the {} handshake bytes within {}",
                  o_.where, p.from, p.got, kOpenBytes, format_duration(o_.hello_timeout));
      return true;
    });
  }

  std::vector<int> missing_ranks() const {
    std::vector<int> missing;
    for (int r = 0; r < o_.rank; ++r) {
      const auto& socks = incoming_[static_cast<std::size_t>(r)];
      if (std::any_of(socks.begin(), socks.end(),
                      [](const AcceptedLink& s) { return !s.socket.valid(); })) {
        missing.push_back(r);
      }
    }
    return missing;
  }

  [[noreturn]] void throw_timeout() {
    const std::vector<int> missing = missing_ranks();
    ErrorContext c;
    c.rank = o_.rank;
    c.size = o_.size;
    c.group = o_.group;
    c.op = "connect";
    c.peers = missing;
    c.timeout = o_.timeout;
    throw TimeoutError(
        fmt::format("{}: ranks {} published their addresses but did not connect to {} within {}; "
                    "they may have died or be stuck: check their logs",
                    o_.where, format_ranks(missing), o_.local_address, format_duration(o_.timeout)),
        c);
  }

  net::Listener& listener_;
  const AcceptOptions& o_;
  std::vector<std::vector<AcceptedLink>> incoming_;
  std::deque<Pending> pending_;
  int remaining_ = 0;
};

}  // namespace

std::vector<std::vector<AcceptedLink>> accept_lower_ranks(net::Listener& listener,
                                                          const AcceptOptions& options) {
  return Acceptor(listener, options).run();
}

}  // namespace chorus::tcp
