// SPDX-License-Identifier: BSD-3-Clause
// TcpStore: a Store served over TCP by one epoll server (embedded in a rank, hosted by
// chorusrun, or run alone as chorus-store), and the server on its own as TcpStoreServer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <chorus/export.hpp>
#include <chorus/store.hpp>

namespace chorus {

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";            // bind address ("::" for dual-stack, "127.0.0.1" ...)
  std::uint16_t port = 29500;              // 0 picks a free port: see TcpStoreServer::port()
  std::size_t max_key_bytes = 8 * 1024;    // larger keys close the offending connection
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  int backlog = 8192;                      // listen backlog (clamped by net.core.somaxconn)
};

// The store server: one thread running an epoll loop. Thread-safe to construct and destroy.
class CHORUS_API TcpStoreServer {
 public:
  // Binds and starts serving before returning. Throws NetworkError if the address is in use
  // (naming the port and what to do) or cannot be bound.
  explicit TcpStoreServer(const TcpStoreServerOptions& options = {});
  ~TcpStoreServer();  // stops the loop and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const noexcept;
  std::size_t num_clients() const;  // connections open now

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // server address to connect to (the bind address if is_server)
  std::uint16_t port = 29500;      // with is_server, 0 picks a free port: see port()
  bool is_server = false;          // also run the server inside this process
  // If set, the constructor returns only once this many clients (this one included) joined.
  std::optional<int> wait_for_clients;
  // Connect deadline and default call timeout. Unset: CHORUS_TIMEOUT, else kDefaultTimeout.
  std::optional<Duration> timeout;
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  // Whether this client counts toward wait_for_clients. Inspection tools (chorus-store
  // --connect) set false so that looking into a live rendezvous never changes it.
  bool counts_as_client = true;
};

// Client of a TcpStoreServer (and optionally its host). Thread-safe: calls from several
// threads are serialized on one connection.
class CHORUS_API TcpStore final : public Store {
 public:
  // Connects, retrying with exponential backoff (the server may start later), before
  // returning. Past the timeout it throws TimeoutError naming host:port, the time waited and
  // the last OS error.
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;  // closes the client; an embedded server stops last

  std::uint16_t port() const noexcept;  // the server's port (useful with port 0)
  const std::string& host() const noexcept;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::optional<Duration> timeout = {}) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = {}) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::optional<Duration> timeout = {}) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void append(const std::string& key, const Bytes& value) override;
  using Store::set;

  // Every key currently in the store (for inspection tools such as `chorus-store keys`).
  std::vector<std::string> list_keys();
  // Round trip to the server; returns the time it took.
  Duration ping();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
