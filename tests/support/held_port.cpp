// SPDX-License-Identifier: BSD-3-Clause
#include "support/held_port.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <random>

namespace chorus::test {

namespace {

// The lowest port of the kernel's range for bind(0) and connect().
int ephemeral_range_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return (in >> low) && low > 1024 ? low : 32768;
}

}  // namespace

HeldLoopbackPort::HeldLoopbackPort() {
  const int end = ephemeral_range_start();
  const int first = end > 12000 ? 10000 : 1024;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, end - 1);
  for (int attempt = 0; attempt < 500 && port_ == 0; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int candidate = pick(rng);
    addr.sin_port = htons(static_cast<std::uint16_t>(candidate));
    // Without SO_REUSEADDR: fails where any socket holds the port. Set afterwards, so that the
    // test's server (SO_REUSEADDR) can bind beside this socket.
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      continue;
    }
    const int one = 1;
    REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
    fd_ = fd;
    port_ = static_cast<std::uint16_t>(candidate);
  }
  REQUIRE(port_ != 0);
}

HeldLoopbackPort::~HeldLoopbackPort() { ::close(fd_); }

}  // namespace chorus::test
