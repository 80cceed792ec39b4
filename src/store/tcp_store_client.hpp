// SPDX-License-Identifier: BSD-3-Clause
// One TcpStore connection shared by every thread of a TcpStore: requests carry ids and may be
// outstanding together (a thread parked in get() never blocks another thread's set()). Whichever
// waiting thread finds nobody reading becomes the reader and hands replies to their callers.
#pragma once

#include "core/private.hpp"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include <chorus/deadline.hpp>

#include "net/address.hpp"
#include "net/frame.hpp"
#include "net/socket.hpp"
#include "store/protocol.hpp"

namespace chorus::store {

class Client {
 public:
  // Connects (with backoff) before returning; throws TimeoutError/NetworkError/StoreError.
  // `token`: the job token ("" for none); with one, the server must prove it knows it too.
  // `peer_timeout`: the connection fails when the server's host stops answering for about
  // this long (Socket::set_dead_peer_timeout); zero: never on that account.
  // `local`: the address to bind before connecting (TcpStoreOptions::source_address); empty:
  // the kernel picks.
  Client(std::string host, std::uint16_t port, Limits limits, Deadline connect_deadline,
         bool member, std::string token = {}, Duration peer_timeout = Duration::zero(),
         net::SocketAddress local = {});
  ~Client();

  // Sends q and waits for its reply until `deadline` (+ a grace period for waiting ops, whose
  // timeout the server enforces). Thread-safe; calls from several threads proceed concurrently.
  // Throws: NetworkError (connection lost: the next call reconnects), TimeoutError (no reply in
  // time), StoreError (protocol broken). Replies with status timeout/error are returned, not
  // thrown: the caller words the error.
  Reply call(Request& q, Deadline deadline);

  const std::string& host() const noexcept { return host_; }
  std::uint16_t port() const noexcept { return port_; }
  std::string address() const;
  const Limits& limits() const noexcept { return limits_; }
  const std::string& token() const noexcept { return token_; }  // "": none

 private:
  struct Pending {
    Op op = Op::ping;
    bool done = false;
    bool abandoned = false;  // the caller gave up; a late reply is dropped
    Reply reply;
  };
  void connect_locked(Deadline deadline);
  void fail_connection_locked(const std::string& why, int os_error);
  // Reads until one frame arrives or `deadline`; called by the thread holding the reader role.
  // Returns false on timeout; throws nothing: failures are recorded with fail_connection_locked.
  bool read_one_frame(std::unique_lock<std::mutex>& lock, Deadline deadline);

  std::string host_;
  std::uint16_t port_;
  Limits limits_;
  bool member_;
  Duration peer_timeout_;
  net::SocketAddress local_;  // bound before each connect; empty: the kernel picks
  std::string token_;         // "": no authentication
  std::mutex mu_;
  std::condition_variable cv_;
  net::Socket socket_;            // replaced only under mu_ with no reader active
  std::uint64_t generation_ = 0;  // guarded by mu_; bumped per (re)connection
  bool broken_ = false;           // guarded by mu_
  std::string broken_why_;        // guarded by mu_
  int broken_errno_ = 0;          // guarded by mu_
  bool broken_protocol_ = false;  // guarded by mu_: the server broke the protocol
  bool reading_ = false;          // guarded by mu_: a thread holds the reader role
  net::FrameReader reader_;       // used only by the reader-role thread
  std::unordered_map<std::uint32_t, Pending> pending_;  // guarded by mu_
  std::uint32_t next_id_ = 1;                           // guarded by mu_
  std::mutex send_mu_;                                  // serializes writes of whole frames
};

}  // namespace chorus::store
