// SPDX-License-Identifier: BSD-3-Clause
// connect() with exponential backoff + jitter, bounded by one Deadline.
#include "net/connect.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"

namespace chorus::net {

int connect_once(const SocketAddress& address, Deadline deadline, Socket& out,
                 const SocketAddress& local) noexcept {
  Socket s;
  try {
    s = Socket::open(address.family());
  } catch (...) {
    return errno != 0 ? errno : EMFILE;
  }
  if (!local.empty() && ::bind(s.fd(), local.get(), local.length()) != 0) {
    return errno;
  }
  int rc;
  do {
    rc = ::connect(s.fd(), address.get(), address.length());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EINPROGRESS) {
      return errno;
    }
    const int ready = poll_until(s.fd(), POLLOUT, deadline);
    if (ready == 0) {
      return ETIMEDOUT;
    }
    if (ready < 0) {
      return -ready;
    }
    if (const int err = s.take_error(); err != 0) {
      return err;
    }
  }
  s.set_nodelay(true);
  out = std::move(s);
  return 0;
}

bool retryable_connect_error(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
    case EAGAIN:
    case EADDRNOTAVAIL:  // ephemeral ports exhausted for a moment
    case EINPROGRESS:
    case EPIPE:
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
      return true;
    default:
      return false;
  }
}

namespace {

// The errors of a connect attempt that nobody answered (as opposed to a refusal or a reset).
bool answerless(int err) {
  return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN;
}

Socket connect_addresses(const std::vector<SocketAddress>& addrs, const std::string& display,
                         Deadline deadline, const ConnectOptions& options,
                         Clock::time_point start) {
  thread_local std::minstd_rand rng(std::random_device{}());
  // A peer whose host is gone answers nothing: stop at the unanswered limit, not the deadline.
  const bool limited = options.unanswered_limit > Duration::zero();
  const Deadline give_up =
      limited ? earliest(deadline, Deadline::at(start + options.unanswered_limit)) : deadline;
  Duration backoff = options.initial_backoff;
  int last_error = 0;
  int attempts = 0;
  for (;;) {
    for (const auto& addr : addrs) {
      ++attempts;
      Socket s;
      int err = connect_once(addr, give_up, s, options.local);
      const bool refused = err == ECONNREFUSED;
      if (err == 0 && options.after_connect) {
        err = options.after_connect(s, deadline);
      }
      if (err == 0) {
        return s;
      }
      last_error = err;
      if (!retryable_connect_error(err) || (refused && options.refused_is_final)) {
        ErrorContext ctx;
        ctx.op = "connect";
        ctx.peer_address = display;
        ctx.os_error = err;
        ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
        throw NetworkError(fmt::format("connect to {} {} failed: {}; check the address and that "
                                       "this host can reach it",
                                       options.what, display, errno_name(err)),
                           ctx);
      }
    }
    if (limited && give_up.expired() && !deadline.expired() && answerless(last_error)) {
      ErrorContext ctx;
      ctx.op = "connect";
      ctx.peer_address = display;
      ctx.os_error = ETIMEDOUT;
      ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
      throw NetworkError(
          fmt::format("no answer from {} at {} for {} ({} attempts, last error {}): its host is "
                      "down or unreachable",
                      options.what, display, format_duration(ctx.elapsed), attempts,
                      errno_name(last_error)),
          ctx);
    }
    // Full jitter: thousands of clients retrying in lockstep would re-flood the listener.
    const auto jittered = Duration(std::uniform_int_distribution<long long>(
        backoff.count() / 2, std::max<long long>(backoff.count(), 1))(rng));
    const auto left = deadline.remaining();
    if (left <= Duration::zero()) {
      break;
    }
    std::this_thread::sleep_for(std::min(jittered, left));
    if (deadline.expired()) {
      break;
    }
    backoff = std::min(options.max_backoff, backoff * 2);
  }
  ErrorContext ctx;
  ctx.op = "connect";
  ctx.peer_address = display;
  ctx.os_error = last_error;
  ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
  ctx.timeout = ctx.elapsed;
  throw TimeoutError(
      fmt::format("could not connect to {} at {} within {} ({} attempts); last error: {}; check "
                  "that the server is running and reachable at that address, or raise the "
                  "timeout (CHORUS_TIMEOUT)",
                  options.what, display, format_duration(ctx.elapsed), attempts,
                  last_error != 0 ? errno_name(last_error) : std::string("none")),
      ctx);
}

}  // namespace

Socket connect(const std::string& host, std::uint16_t port, Deadline deadline,
               const ConnectOptions& options) {
  const auto start = Clock::now();
  const std::string display = format_host_port(host, port);
  const auto addrs = resolve(host, port, deadline);
  return connect_addresses(addrs, display, deadline, options, start);
}

Socket connect(const SocketAddress& address, Deadline deadline, const ConnectOptions& options) {
  return connect_addresses({address}, address.to_string(), deadline, options, Clock::now());
}

}  // namespace chorus::net
