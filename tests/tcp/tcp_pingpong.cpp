// SPDX-License-Identifier: BSD-3-Clause
// TCP ping-pong over loopback (built, not run as a test): the latency floor that the tcp
// backend's small-message collectives are compared with. Two processes, blocking sockets,
// TCP_NODELAY, `bytes`-sized messages; prints the median round trip and half of it.
//
//   tcp_pingpong [bytes=8] [iterations=20000]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

bool full(int fd, char* p, std::size_t n, bool write_side) {
  while (n > 0) {
    const ssize_t r = write_side ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r <= 0) {
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? static_cast<std::size_t>(std::atoll(argv[1])) : 8;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen");
    return 1;
  }
  std::vector<char> buf(bytes);
  const int one = 1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    alarm(120);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      _exit(1);
    }
    while (full(fd, buf.data(), bytes, false) && full(fd, buf.data(), bytes, true)) {
    }
    _exit(0);
  }
  const int fd = ::accept(lfd, nullptr, nullptr);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<double> rtt;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!full(fd, buf.data(), bytes, true) || !full(fd, buf.data(), bytes, false)) {
      std::perror("pingpong");
      return 1;
    }
    rtt.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  ::close(fd);
  ::waitpid(pid, nullptr, 0);
  std::sort(rtt.begin(), rtt.end());
  std::printf(
      "tcp ping-pong %zu B over 127.0.0.1: median round trip %.1f us (one way %.1f us), min %.1f us\n",
      bytes, rtt[rtt.size() / 2], rtt[rtt.size() / 2] / 2, rtt.front());
  return 0;
}
