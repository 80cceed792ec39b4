// SPDX-License-Identifier: BSD-3-Clause
// The TcpStore server: one thread running one epoll loop over non-blocking sockets (no thread
// per client). Waiting get/wait/multi_get calls are parked in KvTable as watches with their own
// deadline timers. Malformed input closes only the offending connection, with a logged reason.
//
// Where things are: tcp_store_server.cpp runs the loop and the connections (accept, eviction,
// timeouts, reading, turns, writing); tcp_store_server_requests.cpp does what each request asks
// (dispatch, the fast path, parked requests and their replies). Pieces with their own state:
// ServerHandshake (hello and authentication of a connection), MemoryBudget (the bytes clients
// make the server hold), both owned by the server; server_connection.hpp defines the
// per-connection state those files share.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <unordered_map>

#include <chorus/tcp_store.hpp>

#include "net/event_loop.hpp"
#include "net/frame.hpp"
#include "net/listener.hpp"
#include "store/kv_table.hpp"
#include "store/protocol.hpp"
#include "store/server_budget.hpp"

namespace chorus::store {

// Raises RLIMIT_NOFILE's soft limit to the hard limit; WARNs when the result is below `want`.
// Returns the soft limit in effect afterwards.
std::uint64_t raise_open_file_limit(std::uint64_t want);

// Memory: every byte a client can make the server hold is budgeted (docs/protocol.md, "Limits").
// Input buffers grow only with received bytes; a request is served only once its reply is
// affordable (the connection's unread replies under max_unread_reply_bytes, all connections
// under max_buffered_bytes, except a 64 KiB reserve per connection so that small requests such
// as ping are always answered); otherwise the frame stays buffered and the connection is not
// read until its replies drain or the global budget frees. Timers close connections that never
// say hello or stall mid-frame / with unread replies; at the connection limit the oldest idle
// stranger (no hello, or a hello and nothing since) is evicted to make room.
class Server {
 public:
  // Binds and starts the loop thread; throws NetworkError (address in use, ...).
  explicit Server(const TcpStoreServerOptions& options);
  ~Server();  // stops the loop thread, closes every connection
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  std::size_t num_clients() const noexcept { return num_clients_.load(std::memory_order_relaxed); }

 private:
  struct Conn;
  struct Parked;
  using Afford = MemoryBudget::Afford;

  void on_accept();
  bool accept_one();  // false: nothing more to accept now
  bool evict_idle_stranger(const char* why);
  void on_conn_event(Conn& c, std::uint32_t events);
  bool read_conn(Conn& c);     // false: the connection was closed
  bool handle_hello(Conn& c);  // one handshake step; false: closed
  void handshake_done(Conn& c);
  bool serve(Conn& c);  // runs buffered work the budget allows; false: closed
  void schedule_serve(Conn& c);
  void handle_request(Conn& c, Request& q);
  // set, get of a present key, add: served from views into the input buffer, the reply encoded
  // straight into the output queue. `general`: leave it to decode_request/handle_request (a
  // missing key, a full store, a non-integer counter: the rare paths that explain themselves).
  enum class Simple { served, blocked, general };
  Simple serve_simple(Conn& c, const SimpleRequest& s);
  // The error reply for a write that would take the table past max_stored_bytes, if it would.
  std::optional<Reply> refuse_if_full(const Request& q) const;
  std::size_t reply_cost(const Request& q) const;         // the reply's would-be size
  std::size_t parked_reply_bytes(const Parked& p) const;  // the values a parked read would return
  // The budget a reply takes: its size, or a short error's where it would exceed
  // max_reply_bytes (the error is what is sent).
  std::size_t priced_as_sent(std::size_t reply_bytes) const;
  std::size_t parked_cost(const Parked& p) const;
  Afford afford(const Conn& c, std::size_t cost) const;
  void block(Conn& c, Afford why, std::size_t cost);
  void deliver(Conn& c, const Parked& p);
  void reply(Conn& c, Op op, const Reply& r);
  bool flush(Conn& c);  // false: closed
  void update_interest(Conn& c);
  void account(Conn& c);
  void wake_budget_waiters();
  void close_conn(std::uint64_t id, const char* level, const std::string& reason);
  void deliver_ready();
  void park(Conn& c, const Request& q, Op op);
  void on_watch_timeout(KvTable::WatchId id);
  void check_client_waits();
  void sweep();  // periodic: hello and stall timeouts
  void warn_bad_client(const std::string& peer, const std::string& reason);

  TcpStoreServerOptions options_;
  Limits limits_;
  std::size_t max_connections_ = 0;
  net::EventLoop loop_;
  net::Listener listener_;
  std::uint16_t port_ = 0;
  int spare_fd_ = -1;  // released to accept-and-close when out of fds (EMFILE)
  KvTable table_;      // loop thread only
  // Ordered by id = accept order, so the first match of a scan is the oldest connection.
  std::map<std::uint64_t, std::unique_ptr<Conn>> conns_;                  // loop thread only
  std::unordered_map<KvTable::WatchId, std::unique_ptr<Parked>> parked_;  // loop thread only
  struct ClientWait {
    std::uint64_t conn;
    std::uint32_t request_id;
    std::uint32_t count;
    net::EventLoop::TimerId timer;
  };
  std::unordered_map<std::uint64_t, ClientWait> client_waits_;  // loop thread only; by wait id
  std::uint64_t next_client_wait_ = 1;
  std::int64_t members_joined_ = 0;  // loop thread only
  std::uint64_t next_conn_ = 1;
  std::uint64_t closes_ = 0;  // connections closed so far (a cheap "was anything closed?" check)
  std::atomic<std::size_t> num_clients_{0};
  MemoryBudget budget_{0, 0};  // loop thread only; sized in the constructor
  bool waiters_wake_posted_ = false;
  std::vector<std::uint8_t> list_keys_cache_;  // encoded list_keys body (loop thread only)
  std::uint64_t list_keys_generation_ = 0;
  bool list_keys_cache_valid_ = false;  // list_keys_cache_ is of list_keys_generation_
  // Rate limit for "closed a misbehaving connection" warnings (loop thread only).
  Clock::time_point warn_window_{};
  int warns_in_window_ = 0;
  std::uint64_t warns_suppressed_ = 0;
  std::thread thread_;
};

}  // namespace chorus::store
