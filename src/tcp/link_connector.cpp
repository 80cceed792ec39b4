// SPDX-License-Identifier: BSD-3-Clause
// LinkConnector (see link_connector.hpp): one thread, one poll() over a wake-up eventfd, the
// listening socket and every handshake in progress, dialed or accepted. Every step is
// non-blocking except reading a peer's address from the store when dialing it.
#include "tcp/link_connector.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "net/address.hpp"
#include "net/connect.hpp"

namespace chorus::tcp {
namespace {

// Accepted connections that have not finished their handshake, beyond which the oldest is
// dropped: a flood of strangers costs bounded memory and descriptors.
constexpr std::size_t kMaxPendingIncoming = 512;
// The thread looks at its deadlines at least this often.
constexpr auto kMaxPollWait = std::chrono::milliseconds(1000);

int poll_timeout_ms(Deadline wake) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake.remaining());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, kMaxPollWait.count()));
}

// A connect that failed transiently (net::retryable_connect_error) is retried this often until
// the peer timeout. A refusal is final: the peer listened before it published.
constexpr auto kConnectRetry = std::chrono::milliseconds(100);
// After a failed accept (out of descriptors) the listener is left alone for this long.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// Writes all of a handshake message at once: a fresh socket's send buffer always takes it.
bool write_whole(net::Socket& s, const std::uint8_t* data, std::size_t len) {
  const net::IoResult r = s.write(data, len);
  return r.ok() && r.bytes == len;
}

}  // namespace

struct LinkConnector::Dial {
  struct Conn {
    net::Socket sock;
    Open open{};
    std::array<std::uint8_t, kAnswerBytes> answer{};
    std::size_t got = 0;
    int error = 0;                          // a connect() that failed at once
    Deadline retry_at = Deadline::never();  // waiting to connect again (a transient error)
    enum class Phase : std::uint8_t { connecting, answering, done } phase = Phase::connecting;
  };
  int peer = -1;
  std::string address;
  net::SocketAddress target;
  std::vector<Conn> conns;
  Deadline connect_deadline = Deadline::never();  // no answer at all by then: host down
  Deadline answer_deadline = Deadline::never();   // accepted but no handshake answer
  bool dead = false;                              // finished, failed or abandoned
};

struct LinkConnector::Incoming {
  net::Socket sock;
  std::string from;  // "host:port" it came from, for messages
  Open open{};
  std::size_t got = 0;
  int peer = -1;  // set once the hello is verified and answered
  std::uint16_t channel = 0;
  net::Mac expected{};
  net::Mac proof{};
  std::size_t proof_got = 0;
  Deadline deadline = Deadline::never();
  bool done = false;
  // A dial from a peer we still hold a link to: the peer released it and dials again, and
  // our engine has not told us yet (or an abandoned crossing dial, which closes). Decided on
  // release(), dropped at its deadline or EOF.
  bool parked = false;
  Hello parked_hello{};
};

LinkConnector::LinkConnector(Store& store, Membership membership, net::Listener listener,
                             LinkConnectorOptions options)
    : store_(store),
      membership_(std::move(membership)),
      listener_(std::move(listener)),
      o_(std::move(options)),
      state_(static_cast<std::size_t>(o_.size), State::none),
      accepted_(static_cast<std::size_t>(o_.size)),
      addresses_(static_cast<std::size_t>(o_.size)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    throw NetworkError(fmt::format("{}: eventfd: {}", o_.where, std::strerror(errno)));
  }
  thread_ = std::thread([this] { run(); });
}

LinkConnector::~LinkConnector() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  cv_.notify_all();
  thread_.join();
  ::close(wake_fd_);
}

void LinkConnector::set_notify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

void LinkConnector::request(int peer) {
  {
    std::lock_guard lock(mu_);
    requests_.push_back(peer);
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void LinkConnector::release(int peer) {
  {
    std::lock_guard lock(mu_);
    requests_.push_back(-peer - 1);
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void LinkConnector::take(std::vector<NewLink>& links, std::vector<LinkFailure>& failures) {
  // The engine asks on every poll; almost always there is nothing, and no lock is taken.
  if (!has_results_.load(std::memory_order_acquire)) {
    return;
  }
  std::lock_guard lock(mu_);
  has_results_.store(false, std::memory_order_relaxed);
  std::move(ready_links_.begin(), ready_links_.end(), std::back_inserter(links));
  ready_links_.clear();
  std::move(ready_failures_.begin(), ready_failures_.end(), std::back_inserter(failures));
  ready_failures_.clear();
}

void LinkConnector::wait(Deadline until) {
  std::unique_lock lock(mu_);
  const auto ready = [&] { return stop_ || !ready_links_.empty() || !ready_failures_.empty(); };
  if (until.is_never()) {
    cv_.wait(lock, ready);
  } else {
    cv_.wait_until(lock, until.when(), ready);
  }
}

std::string LinkConnector::address_of(int peer) {
  std::lock_guard lock(mu_);
  return addresses_[static_cast<std::size_t>(peer)];
}

// ---- the thread ------------------------------------------------------------------------------

void LinkConnector::run() {
  // Nothing here is expected to throw (store errors become link failures); if something does,
  // the thread must not take the process down: it says so and keeps serving.
  for (;;) {
    try {
      serve();
      return;
    } catch (const std::exception& e) {
      CHORUS_WARN(init, "{}: link connector: {}", o_.where, e.what());
    }
  }
}

void LinkConnector::serve() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Dial*, std::size_t>> polled_dials;
  std::vector<Incoming*> polled_incoming;
  for (;;) {
    std::vector<int> requests;
    {
      std::lock_guard lock(mu_);
      if (stop_) {
        return;
      }
      requests.swap(requests_);
    }
    for (int request : requests) {
      if (request < 0) {
        const int peer = -request - 1;
        if (state_[static_cast<std::size_t>(peer)] == State::up) {
          state_[static_cast<std::size_t>(peer)] = State::none;
        }
        // A dial from that peer that came before we heard of the release.
        for (auto& in : incoming_) {
          if (in->parked && in->parked_hello.src == static_cast<std::uint32_t>(peer)) {
            in->parked = false;
            decide(*in, in->parked_hello);
          }
        }
      } else if (state_[static_cast<std::size_t>(request)] == State::none) {
        start_dial(request);
      }
    }

    fds.clear();
    polled_dials.clear();
    polled_incoming.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // Out of descriptors, the listener stays readable: look at it again a little later.
    fds.push_back({listener_.fd(), static_cast<short>(accept_paused_.expired() ? POLLIN : 0), 0});
    Deadline wake = Deadline::after(kMaxPollWait);
    if (!accept_paused_.expired()) {
      wake = earliest(wake, accept_paused_);
    }
    for (auto& d : dials_) {
      for (std::size_t i = 0; i < d->conns.size(); ++i) {
        const auto phase = d->conns[i].phase;
        wake = earliest(wake, d->conns[i].retry_at);
        if (phase == Dial::Conn::Phase::done || !d->conns[i].sock.valid()) {
          continue;
        }
        fds.push_back(
            {d->conns[i].sock.fd(),
             static_cast<short>(phase == Dial::Conn::Phase::connecting ? POLLOUT : POLLIN), 0});
        polled_dials.emplace_back(d.get(), i);
      }
      wake = earliest(wake, earliest(d->connect_deadline, d->answer_deadline));
    }
    for (auto& in : incoming_) {
      fds.push_back({in->sock.fd(), POLLIN, 0});
      polled_incoming.push_back(in.get());
      wake = earliest(wake, in->deadline);
    }
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(wake));
    if (n > 0) {
      if (fds[0].revents != 0) {
        std::uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof(count));
      }
      std::size_t at = 2;
      for (auto& [dial, conn] : polled_dials) {
        const short revents = fds[at++].revents;
        if (revents != 0 && !dial->dead) {
          step_dial(*dial, conn, revents);
        }
      }
      for (Incoming* in : polled_incoming) {
        const short revents = fds[at++].revents;
        if (revents != 0 && !in->done) {
          step_incoming(*in);
        }
      }
      if (fds[1].revents & POLLIN) {
        accept_all();
      }
    }
    expire();
    std::erase_if(dials_, [](const auto& d) { return d->dead; });
    std::erase_if(incoming_, [](const auto& in) { return in->done; });
  }
}

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

void LinkConnector::accept_all() {
  for (;;) {
    net::AcceptResult a = listener_.accept();
    if (!a.io.ok()) {
      if (!a.io.would_block()) {
        CHORUS_WARN(init, "{}: accept on {} failed: {}", o_.where, o_.local_address,
                    a.io.describe());
        accept_paused_ = Deadline::after(kAcceptPause);
      }
      return;
    }
    if (incoming_.size() >= kMaxPendingIncoming) {
      auto oldest = std::find_if(incoming_.begin(), incoming_.end(),
                                 [](const auto& in) { return !in->done; });
      if (oldest != incoming_.end()) {
        CHORUS_WARN(init,
                    "{}: dropped a connection from {} that had not finished its handshake, to "
                    "make room ({} pending)",
                    o_.where, (*oldest)->from, incoming_.size());
        (*oldest)->done = true;
        (*oldest)->sock.close();
      }
      std::erase_if(incoming_, [](const auto& in) { return in->done; });
    }
    auto in = std::make_unique<Incoming>();
    in->sock = std::move(a.socket);
    in->from = a.peer.to_string();
    in->deadline = Deadline::after(o_.hello_timeout);
    incoming_.push_back(std::move(in));
  }
}

void LinkConnector::step_incoming(Incoming& in) {
  auto drop = [&](const std::string& why) {
    CHORUS_WARN(init, "{}: dropped a connection from {}: {}", o_.where, in.from, why);
    in.done = true;
    in.sock.close();
  };
  if (in.parked) {
    std::uint8_t byte;
    const net::IoResult r = in.sock.read(&byte, 1);
    if (!r.would_block()) {
      in.done = true;  // closed (an abandoned dial), or bytes out of turn
      in.sock.close();
    }
    return;
  }
  if (in.peer < 0) {
    // A probe is a bare hello: read the hello first, the nonce only from a real connection.
    const std::size_t want = in.got < kHelloBytes ? kHelloBytes : kOpenBytes;
    const net::IoResult r = in.sock.read(in.open.data() + in.got, want - in.got);
    if (r.would_block()) {
      return;
    }
    if (!r.ok()) {
      drop(fmt::format("{} after {} of the {} handshake bytes",
                       r.closed() ? "closed" : r.describe(), in.got, kOpenBytes));
      return;
    }
    in.got += r.bytes;
    if (in.got < kHelloBytes) {
      return;
    }
    Hello h;
    const std::string bad = check_hello(in.open.data(), membership_.group_id, o_.rank, kAnySource,
                                        o_.size, static_cast<std::uint16_t>(o_.channels), h);
    if (!bad.empty()) {
      drop("refused: " + bad);
      return;
    }
    if (h.channel == kProbeChannel || h.channel == kCrossingChannel) {
      in.done = true;  // a rank checking that we are alive (membership.cpp): quietly
      in.sock.close();
      return;
    }
    if (in.got < kOpenBytes) {
      return;
    }
    decide(in, h);
    return;
  }
  const net::IoResult r =
      in.sock.read(in.proof.data() + in.proof_got, in.proof.size() - in.proof_got);
  if (r.would_block()) {
    return;
  }
  if (!r.ok()) {
    drop(fmt::format("rank {} closed the connection before its membership proof", in.peer));
    return;
  }
  in.proof_got += r.bytes;
  if (in.proof_got < in.proof.size()) {
    return;
  }
  if (!net::equal_macs(in.proof, in.expected)) {
    drop(
        fmt::format("it claims to be rank {} but sent a wrong membership proof: not a member of "
                    "this formation (a replayed or forged handshake, or a rank whose "
                    "CHORUS_STORE_TOKEN differs from this one's)",
                    in.peer));
    return;
  }
  const auto up = static_cast<std::size_t>(in.peer);
  auto& slots = accepted_[up];
  if (slots.empty()) {
    slots.resize(static_cast<std::size_t>(o_.channels));
  }
  if (slots[in.channel].valid() || state_[up] != State::accepting) {
    drop(fmt::format("a second connection claiming rank {} channel {}", in.peer, in.channel));
    return;
  }
  slots[in.channel] = std::move(in.sock);
  in.done = true;
  if (std::all_of(slots.begin(), slots.end(), [](const net::Socket& s) { return s.valid(); })) {
    std::vector<net::Socket> sockets = std::move(slots);
    slots.clear();
    deliver(in.peer, std::move(sockets));
  }
}

// A verified hello and nonce from rank h.src: take its link, or tell it ours wins.
void LinkConnector::decide(Incoming& in, const Hello& h) {
  const int peer = static_cast<int>(h.src);
  const auto up = static_cast<std::size_t>(peer);
  const State s = state_[up];
  if (s == State::up) {
    in.parked = true;
    in.parked_hello = h;
    return;
  }
  if (s == State::failed || (s == State::dialing && peer > o_.rank)) {
    // Our own dial to that (higher) rank is under way, or the link exists: it keeps ours.
    const auto crossing = encode_hello(
        {membership_.group_id, static_cast<std::uint32_t>(o_.rank), h.src, kCrossingChannel,
         static_cast<std::uint16_t>(o_.channels), static_cast<std::uint32_t>(o_.size)});
    (void)write_whole(in.sock, crossing.data(), crossing.size());
    in.done = true;
    in.sock.close();
    return;
  }
  if (s == State::dialing) {
    abandon_dial(peer);  // the lower rank's dial wins
  }
  state_[up] = State::accepting;
  const Open mine =
      make_open({membership_.group_id, static_cast<std::uint32_t>(o_.rank), h.src, h.channel,
                 static_cast<std::uint16_t>(o_.channels), static_cast<std::uint32_t>(o_.size)});
  const net::Mac proof = accept_proof(membership_.secret, in.open.data(), mine.data());
  std::array<std::uint8_t, kAnswerBytes> answer{};
  std::copy(mine.begin(), mine.end(), answer.begin());
  std::copy(proof.begin(), proof.end(), answer.begin() + kOpenBytes);
  if (!write_whole(in.sock, answer.data(), answer.size())) {
    CHORUS_WARN(init, "{}: rank {} ({}) closed its connection during the handshake", o_.where, peer,
                in.from);
    in.done = true;
    in.sock.close();
    return;
  }
  in.expected = connect_proof(membership_.secret, in.open.data(), mine.data());
  in.peer = peer;
  in.channel = h.channel;
  in.deadline = Deadline::after(o_.hello_timeout);
}

void LinkConnector::abandon_dial(int peer) {
  for (auto& d : dials_) {
    if (d->peer == peer && !d->dead) {
      d->dead = true;
      for (auto& c : d->conns) {
        c.sock.close();
      }
    }
  }
  state_[static_cast<std::size_t>(peer)] = State::accepting;
}

void LinkConnector::fail(int peer, std::string message, int os_error, bool timed_out) {
  for (auto& d : dials_) {
    if (d->peer == peer) {
      d->dead = true;
    }
  }
  state_[static_cast<std::size_t>(peer)] = State::failed;
  {
    std::lock_guard lock(mu_);
    ready_failures_.push_back({peer, std::move(message), os_error, timed_out});
    has_results_.store(true, std::memory_order_release);
  }
  publish();
}

void LinkConnector::deliver(int peer, std::vector<net::Socket> sockets) {
  const auto up = static_cast<std::size_t>(peer);
  state_[up] = State::up;
  if (!membership_.addresses.contains(peer)) {
    try {
      // A peer that has left already leaves its address unknown: messages name it by rank.
      (void)fetch_addresses(store_, membership_, {peer}, Deadline::after(o_.timeout));
    } catch (const Error& e) {
      CHORUS_INFO(init, "{}: could not read rank {}'s address for messages: {}", o_.where, peer,
                  e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    const auto known = membership_.addresses.find(peer);
    addresses_[up] = known == membership_.addresses.end() ? std::string() : known->second;
    ready_links_.push_back({peer, addresses_[up], std::move(sockets)});
    has_results_.store(true, std::memory_order_release);
  }
  publish();
}

void LinkConnector::publish() {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) {
    notify();
  }
}

void LinkConnector::expire() {
  for (auto& d : dials_) {
    for (std::size_t i = 0; i < d->conns.size() && !d->dead; ++i) {
      if (d->conns[i].retry_at.expired()) {
        start_connect(*d, i);
      }
    }
    if (d->dead) {
      continue;
    }
    const bool connecting = std::any_of(d->conns.begin(), d->conns.end(), [](const Dial::Conn& c) {
      return c.phase == Dial::Conn::Phase::connecting;
    });
    if (connecting && d->connect_deadline.expired()) {
      fail(d->peer,
           fmt::format(
               "rank {} published its address {} but does not answer there within {}: "
               "no reset came, so its host is down, unreachable, or drops packets (peer "
               "timeout {}, CHORUS_PEER_TIMEOUT)",
               d->peer, d->address,
               format_duration(o_.peer_timeout > Duration::zero() ? o_.peer_timeout : o_.timeout),
               format_duration(o_.peer_timeout)),
           ETIMEDOUT, false);
    } else if (d->answer_deadline.expired()) {
      fail(d->peer,
           fmt::format("rank {} at {} accepted the connection but did not answer the handshake "
                       "within {}; it may be stuck: check its log",
                       d->peer, d->address, format_duration(o_.timeout)),
           ETIMEDOUT, true);
    }
  }
  for (auto& in : incoming_) {
    if (!in->done && in->deadline.expired()) {
      CHORUS_WARN(init,
                  "{}: dropped a connection from {}: sent {} of the {} handshake bytes within {}",
                  o_.where, in->from, in->peer < 0 ? in->got : kOpenBytes + in->proof_got,
                  kOpenBytes + net::kMacBytes, format_duration(o_.hello_timeout));
      in->done = true;
      in->sock.close();
    }
  }
}

}  // namespace chorus::tcp
