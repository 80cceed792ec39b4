// SPDX-License-Identifier: BSD-3-Clause
// LinkConnector (see link_connector.hpp): one thread, one poll() over a wake-up eventfd, the
// listening socket and every handshake in progress, dialed or accepted. Every step is
// non-blocking except reading a peer's address from the store when dialing it. This file holds
// the public side, the thread's loop and the outcomes (links, failures, deadlines); the steps of
// a dial are in link_dialer.cpp, those of an accepted connection in link_acceptor.cpp.
#include "cpu/transports/socket/link_connector.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "cpu/transports/socket/link_handshakes.hpp"

namespace chorus::cpu {
namespace {

// The thread looks at its deadlines at least this often.
constexpr auto kMaxPollWait = std::chrono::milliseconds(1000);

int poll_timeout_ms(Deadline wake) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake.remaining());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, kMaxPollWait.count()));
}

}  // namespace

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

}  // namespace chorus::cpu
