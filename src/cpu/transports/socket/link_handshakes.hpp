// SPDX-License-Identifier: BSD-3-Clause
// The state of one handshake in progress at the LinkConnector: a dial to a peer
// (LinkConnector::Dial, one connection per channel) or a connection accepted from anyone
// (LinkConnector::Incoming). Shared by the connector's files (link_connector.cpp polls them and
// expires them, link_dialer.cpp and link_acceptor.cpp step them), private to them.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/bootstrap/handshake.hpp"
#include "cpu/transports/socket/link_connector.hpp"
#include "net/address.hpp"
#include "net/hmac.hpp"
#include "net/socket.hpp"

namespace chorus::cpu {

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

// Writes all of a handshake message at once: a fresh socket's send buffer always takes it.
inline bool write_whole(net::Socket& s, const std::uint8_t* data, std::size_t len) {
  const net::IoResult r = s.write(data, len);
  return r.ok() && r.bytes == len;
}

}  // namespace chorus::cpu
