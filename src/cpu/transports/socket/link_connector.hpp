// SPDX-License-Identifier: BSD-3-Clause
// LinkConnector: makes the group's peer links when they are first needed, on a thread of its
// own, so that neither the engine's progress thread nor a user thread ever blocks on a peer's
// handshake.
//
// A link to a peer is one control socket plus sockets_per_peer data sockets, each verified by
// the handshake of handshake.hpp (hello, nonce, membership proofs). The connector owns the
// rank's listening socket and accepts at any time: a peer may dial whenever its own ops need
// this rank. A rank dials a peer on request (request(peer)); the peer's address is read from
// the store then (one round trip, once per peer).
//
// Crossing dials: both ends may dial each other at the same moment (a tagged send meets a
// tagged send). The link the lower rank dialed wins: the lower rank answers the higher rank's
// dial with a "crossing" hello and closes it; the higher rank, seeing the lower rank's dial
// while dialing itself, abandons its own and accepts. Both ends then hold the same sockets.
//
// Failures name the peer: a dial refused at the peer's published address means its process
// is gone (recorded in the store so every member names it, membership.hpp record_gone); a
// connect that gets no answer at all for the peer timeout means its host is down; a peer that
// accepts but never answers the handshake is named at the group timeout. Strangers on the port
// (scanners, garbage, another group, liveness probes) cost at most their hello deadline.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "cpu/bootstrap/handshake.hpp"
#include "cpu/bootstrap/membership.hpp"
#include "net/listener.hpp"
#include "net/socket.hpp"

namespace chorus::cpu {

struct LinkConnectorOptions {
  int rank = 0;
  int size = 1;
  int channels = 2;           // control + data sockets per link
  std::string where;          // "tcp group setup on rank 1/4 [world]", for messages
  std::string local_address;  // this rank's "host:port"
  Duration timeout{0};        // the group timeout: bounds a peer's handshake answer
  Duration hello_timeout = std::chrono::seconds(5);  // a stranger's hello
  Duration peer_timeout{0};  // a connect with no answer at all for this long: host down
};

// A verified link: sockets[0] is the control socket, the rest the data sockets in order.
struct NewLink {
  int peer = -1;
  std::string address;  // the peer's "host:port"
  std::vector<net::Socket> sockets;
};

struct LinkFailure {
  int peer = -1;
  std::string message;  // a sentence naming the peer and what happened
  int os_error = 0;
  bool timed_out = false;  // the peer accepted but never completed the handshake
};

class LinkConnector {
 public:
  // `store` must outlive the connector (the group owns both). Starts the thread.
  LinkConnector(Store& store, Membership membership, net::Listener listener,
                LinkConnectorOptions options);
  ~LinkConnector();  // stops the thread; closes the listener and unfinished handshakes
  LinkConnector(const LinkConnector&) = delete;
  LinkConnector& operator=(const LinkConnector&) = delete;

  // Any thread. Called on the connector's thread whenever results are ready to take().
  void set_notify(std::function<void()> notify);
  // Any thread: dial `peer` unless a link to it is up or being made.
  void request(int peer);
  // Any thread: the link to `peer` was closed by agreement (CHORUS_MAX_PEER_SOCKETS); the next
  // need dials again, and a dial from it that arrived meanwhile is taken.
  void release(int peer);
  // Any thread: hands over the links and failures that are ready.
  void take(std::vector<NewLink>& links, std::vector<LinkFailure>& failures);
  // Any thread: waits until something is ready to take() or `until` passes.
  void wait(Deadline until);
  // The peer's "host:port" if it is known (dialed, or accepted from), else "".
  std::string address_of(int peer);

 private:
  struct Dial;
  struct Incoming;
  enum class State : std::uint8_t { none, dialing, accepting, up, failed };

  void run();
  void serve();
  void start_dial(int peer);
  void start_connect(Dial& d, std::size_t index);
  void step_dial(Dial& d, std::size_t conn, short revents);
  void accept_all();
  void step_incoming(Incoming& in);
  void decide(Incoming& in, const Hello& h);
  void fail(int peer, std::string message, int os_error, bool timed_out);
  void abandon_dial(int peer);
  void deliver(int peer, std::vector<net::Socket> sockets);
  void expire();
  void publish();

  Store& store_;
  Membership membership_;
  net::Listener listener_;
  LinkConnectorOptions o_;
  int wake_fd_ = -1;
  Deadline accept_paused_ = Deadline::at(Clock::time_point{});  // expired: accepting

  std::vector<State> state_;  // by peer (connector thread only)
  std::vector<std::unique_ptr<Dial>> dials_;
  std::deque<std::unique_ptr<Incoming>> incoming_;
  // Per peer, the accepted channels of a link being accepted (verified ones only).
  std::vector<std::vector<net::Socket>> accepted_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> requests_;
  std::atomic<bool> has_results_{false};  // ready_links_ or ready_failures_ is not empty
  std::vector<NewLink> ready_links_;
  std::vector<LinkFailure> ready_failures_;
  std::vector<std::string> addresses_;  // by peer, for address_of
  std::function<void()> notify_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace chorus::cpu
