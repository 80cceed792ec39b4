// SPDX-License-Identifier: BSD-3-Clause
// A loopback TCP port for a test to hand a server it starts later, held until the test is done.
#pragma once

#include <cstdint>

namespace chorus::test {

// A port of 127.0.0.1 that nothing listens on, held for this object's life: a socket bound to
// it that never listens, so that no program looking for a free port meanwhile (meson runs tests
// side by side, beside torch's own suite) is handed it before this test's server binds it:
// - bind(0) and connect(): the kernel never hands them a bound port, and the port is picked
//   below the kernel's ephemeral range, so a "bind 0, close, bind again later" picker cannot
//   have been handed it just before either;
// - another HeldLoopbackPort (or tests/torch/launch.py's reserve_port): each binds without
//   SO_REUSEADDR, which fails on a port any socket holds; SO_REUSEADDR is set after the bind.
// A connect to it is refused; a server that sets SO_REUSEADDR (net::Listener, chorusrun's
// store, torch's TCPStore) binds and listens there.
class HeldLoopbackPort {
 public:
  HeldLoopbackPort();
  ~HeldLoopbackPort();
  HeldLoopbackPort(const HeldLoopbackPort&) = delete;
  HeldLoopbackPort& operator=(const HeldLoopbackPort&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace chorus::test
