// SPDX-License-Identifier: BSD-3-Clause
// The TcpStore server: one thread running one epoll loop over non-blocking sockets (no thread
// per client). Waiting get/wait/multi_get calls are parked in KvTable as watches with their own
// deadline timers. Malformed input closes only the offending connection, with a logged reason.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>

#include <chorus/tcp_store.hpp>

#include "net/event_loop.hpp"
#include "net/frame.hpp"
#include "net/listener.hpp"
#include "store/kv_table.hpp"
#include "store/protocol.hpp"

namespace chorus::store {

// Raises RLIMIT_NOFILE's soft limit to the hard limit; WARNs when the result is below `want`.
// Returns the soft limit in effect afterwards.
std::uint64_t raise_open_file_limit(std::uint64_t want);

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
  void on_accept();
  void on_conn_event(std::uint64_t id, std::uint32_t events);
  bool read_conn(Conn& c);     // false: the connection was closed
  bool handle_hello(Conn& c);  // false: closed
  void handle_request(Conn& c, Request& q);
  void reply(Conn& c, Op op, const Reply& r);
  bool flush(Conn& c);  // false: closed
  void update_interest(Conn& c);
  void close_conn(std::uint64_t id, const char* level, const std::string& reason);
  void deliver_ready();
  void park(Conn& c, const Request& q, Op op);
  void on_watch_timeout(KvTable::WatchId id);
  void check_client_waits();
  void warn_bad_client(const std::string& peer, const std::string& reason);

  TcpStoreServerOptions options_;
  Limits limits_;
  net::EventLoop loop_;
  net::Listener listener_;
  std::uint16_t port_ = 0;
  int spare_fd_ = -1;  // released to accept-and-close when out of fds (EMFILE)
  KvTable table_;      // loop thread only
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;         // loop thread only
  std::unordered_map<KvTable::WatchId, std::unique_ptr<Parked>> parked_;   // loop thread only
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
  std::atomic<std::size_t> num_clients_{0};
  // Rate limit for "closed a misbehaving connection" warnings (loop thread only).
  Clock::time_point warn_window_{};
  int warns_in_window_ = 0;
  std::uint64_t warns_suppressed_ = 0;
  std::thread thread_;
};

}  // namespace chorus::store
