// SPDX-License-Identifier: BSD-3-Clause
// The accepting half of mesh setup: accepts the lower ranks' sockets on the rank's listening
// port and verifies their hellos, all connections at once (one poll over the listener and every
// accepted socket that has not finished its hello). A stranger (a port scanner, a health check,
// another job, garbage) costs at most its own hello deadline and never delays the ranks.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "net/listener.hpp"
#include "net/socket.hpp"
#include "tcp/handshake.hpp"

namespace chorus::tcp {

struct AcceptOptions {
  GroupSecret secret{};  // the formation's, for the membership proofs
  int rank = 0;
  int size = 1;
  std::uint16_t channels = 1;  // sockets per peer pair
  std::uint64_t group_id = 0;
  std::string where;          // "tcp group setup on rank 1/4 [world]"
  std::string group;          // group name, for error contexts
  std::string local_address;  // for messages
  Duration timeout{0};        // the group timeout, for messages
  Deadline deadline = Deadline::never();
  Duration hello_timeout = std::chrono::seconds(5);  // per connection, capped by deadline
  // Called about every `tick` while waiting, with the lower ranks not fully connected yet; may
  // throw to abandon setup (a recorded clash, a rank found dead).
  std::function<void(const std::vector<int>& missing)> on_tick;
  Duration tick = std::chrono::milliseconds(250);
};

// An accepted connection, answered with our hello, nonce and proof; the connecting end's proof
// (its last handshake message, read by the caller once every answer is out) must equal
// `expected_proof` before the socket carries anything.
struct AcceptedLink {
  net::Socket socket;
  net::Mac expected_proof{};
  std::string from;  // peer "host:port"
};

// Returns incoming[src][channel] for every src < rank, each hello verified and answered.
// Throws TimeoutError naming the lower ranks that did not connect by the deadline.
// Connections that fail their hello (garbage, wrong group, silence past hello_timeout) are
// closed and logged at WARN with their address; probes of this group are closed quietly.
std::vector<std::vector<AcceptedLink>> accept_lower_ranks(net::Listener& listener,
                                                          const AcceptOptions& options);

}  // namespace chorus::tcp
