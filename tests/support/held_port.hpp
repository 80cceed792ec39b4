// SPDX-License-Identifier: BSD-3-Clause
// A loopback TCP port for a test to hand a server it starts later, held until the test is done.
#pragma once

#include <cstdint>

namespace chorus::test {

// A port of 127.0.0.1 that nothing listens on, held for this object's life: a socket bound to
// it with SO_REUSEADDR that never listens. While it is bound the kernel hands the port to no
// other bind(0) or connect(), so a test beside this one (meson runs them side by side, and the
// torch legs reserve their stores' ports the same way) cannot be given it before this test's
// server binds it, as it could in the window of a port bound and released at once. A connect
// to it is refused; a server that sets SO_REUSEADDR (net::Listener, chorusrun's store, torch's
// TCPStore) binds and listens there.
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
