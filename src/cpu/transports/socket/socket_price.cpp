// SPDX-License-Identifier: BSD-3-Clause
// The socket transport's host probe: a loopback tcp pair in this process.
#include "cpu/transports/socket/socket_price.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace chorus::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A connected loopback tcp pair, or nothing.
struct SocketPair {
  int a = -1;
  int b = -1;
  ~SocketPair() {
    if (a >= 0) {
      ::close(a);
    }
    if (b >= 0) {
      ::close(b);
    }
  }
};

bool make_loopback_pair(SocketPair& p) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) {
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::listen(listener, 1) == 0 &&
            ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (ok) {
    p.a = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = p.a >= 0 && ::connect(p.a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  if (ok) {
    pollfd pfd{listener, POLLIN, 0};
    ok = ::poll(&pfd, 1, 1000) == 1;  // the connection is queued already; never waits long
    p.b = ok ? ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    ok = p.b >= 0;
  }
  ::close(listener);
  const int one = 1;
  for (int fd : {p.a, p.b}) {
    if (fd >= 0) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
  }
  return ok;
}

// Reads or writes exactly `bytes`, waiting at most 1 s for each step.
bool move_all(int fd, std::byte* data, std::size_t bytes, bool write) {
  std::size_t done = 0;
  while (done < bytes) {
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, 1000) != 1) {
      return false;
    }
    const ssize_t n = write ? ::send(fd, data + done, bytes - done, MSG_NOSIGNAL)
                            : ::recv(fd, data + done, bytes - done, 0);
    if (n <= 0) {
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Half a 1-byte round trip (median of 30), and the throughput of a 1 MiB stream (the fastest
// of three), over loopback tcp.
std::optional<LinkCost> loopback_tcp_once() {
  SocketPair p;
  if (!make_loopback_pair(p)) {
    return std::nullopt;
  }
  constexpr int kTrips = 30;
  constexpr std::size_t kStreamBytes = 1 << 20;
  constexpr int kStreams = 3;
  std::atomic<bool> helper_ok{true};
  std::thread helper([&] {
    std::byte token{};
    for (int i = 0; i < kTrips && helper_ok; ++i) {
      helper_ok = move_all(p.b, &token, 1, false) && move_all(p.b, &token, 1, true);
    }
    std::vector<std::byte> sink(kStreamBytes);
    for (int i = 0; i < kStreams && helper_ok; ++i) {
      helper_ok = move_all(p.b, sink.data(), kStreamBytes, false) && move_all(p.b, &token, 1, true);
    }
  });
  bool ok = true;
  std::vector<double> trips;
  std::byte token{};
  for (int i = 0; i < kTrips && ok; ++i) {
    const auto t0 = Clock::now();
    ok = move_all(p.a, &token, 1, true) && move_all(p.a, &token, 1, false);
    trips.push_back(seconds_since(t0));
  }
  std::vector<std::byte> source(kStreamBytes, std::byte{1});
  double stream_s = 1e9;
  for (int i = 0; i < kStreams && ok; ++i) {
    const auto t0 = Clock::now();
    ok = move_all(p.a, source.data(), kStreamBytes, true) && move_all(p.a, &token, 1, false);
    stream_s = std::min(stream_s, seconds_since(t0));
  }
  if (!ok) {
    ::shutdown(p.a, SHUT_RDWR);  // the helper's next wait ends at once
  }
  helper.join();
  if (!ok || !helper_ok) {
    return std::nullopt;
  }
  return LinkCost{median(trips) / 2 * 1e6, kStreamBytes / stream_s / 1e9};
}

}  // namespace

std::optional<LinkCost> measure_loopback_tcp() {
  // In batches, the median batch's round counting: a moment when other work held the CPUs
  // must not set this host's rounds in its cache for good.
  std::vector<double> alpha_us;
  double gbps = 0;
  for (int batch = 0; batch < 3; ++batch) {
    if (const auto t = loopback_tcp_once()) {
      alpha_us.push_back(t->alpha_us);
      gbps = std::max(gbps, t->gbps);
    }
  }
  if (alpha_us.empty()) {
    return std::nullopt;
  }
  return LinkCost{median(alpha_us), gbps};
}

}  // namespace chorus::cpu
