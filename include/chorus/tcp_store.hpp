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

namespace store {
struct TcpStoreAccess;  // the library's own view of a client (its job token); not API
}  // namespace store

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";          // bind address ("::" for dual-stack, "127.0.0.1" ...)
  std::uint16_t port = 29500;            // 0 picks a free port: see TcpStoreServer::port()
  std::size_t max_key_bytes = 8 * 1024;  // larger keys close the offending connection
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  int backlog = 8192;  // listen backlog (clamped by net.core.somaxconn)
  // Memory and connection bounds (docs/protocol.md, "Limits"): whatever clients send, the server
  // holds at most about max_buffered_bytes + max_connections x 256 KiB + max_stored_bytes.
  std::size_t max_unread_reply_bytes = 64u << 20;  // per connection: its requests wait past this
  std::size_t max_reply_bytes = 64u << 20;         // one reply (multi_get, keys); larger: error
  std::size_t max_buffered_bytes = 1u << 30;       // all connections: input + unsent replies
  // Keys and values held (each key also counts 64 bytes of bookkeeping): a set, multi_set,
  // append, add or compare_set that would pass it is refused (StoreError naming the limit) and
  // stores nothing. Job state is normally kilobytes; this bounds what a runaway or hostile
  // client can make the server keep.
  std::size_t max_stored_bytes = 1u << 30;
  std::size_t max_connections = 0;  // 0: the open file limit minus 64; past it, idle strangers go
  Duration hello_timeout = std::chrono::seconds(5);   // connected without a hello: closed
  Duration stall_timeout = std::chrono::seconds(30);  // a partial frame or unread replies that
                                                      // make no progress for this long: closed
  // Job token (16-4096 bytes). Non-empty: every client must prove it knows it (challenge-
  // response, docs/protocol.md §1.1) before any key operation; the token never crosses the
  // network. Empty: anyone who can connect may read and write every key.
  std::string token;
};

// The store server: one background thread running one epoll loop over non-blocking sockets (no
// thread per client); waiting get/wait calls are parked as server-side watches. Serves 4096+
// concurrent clients when the open file limit allows: the constructor raises the soft limit to
// the hard limit and logs a WARN when that stays below ~4096. Malformed input closes only the
// offending connection, with a logged reason (docs/protocol.md). Construct and destroy from any
// thread; port() and num_clients() are thread-safe.
class CHORUS_API TcpStoreServer {
 public:
  // Binds, listens and starts the loop thread before returning (never blocks on clients). Throws
  // NetworkError if the address is in use (naming the port and what to do), cannot be bound, or
  // the host name does not resolve within 30 s.
  explicit TcpStoreServer(const TcpStoreServerOptions& options = {});
  // Stops the loop thread and closes every connection (clients then get NetworkError). Bounded:
  // the loop never blocks. Never throws.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const noexcept;  // the bound port (the chosen one when options.port was 0)
  std::size_t num_clients() const;      // connections open now (approximate while they churn)

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
  // Largest reply frame this client accepts; a larger announced length closes the connection
  // with StoreError before anything is allocated.
  std::size_t max_reply_bytes = 256u << 20;
  // Job token. Unset: CHORUS_STORE_TOKEN if set, else none; "" forces none. With a token the
  // client authenticates and also checks the server's proof (a server without the token, or a
  // fake one, fails at connect with StoreError); an embedded server (is_server) requires it.
  std::optional<std::string> token;
  // The server host's liveness: a connection that gets no answer at all (host down, network
  // partitioned) fails within about this long, even inside a long wait(), with NetworkError
  // (TCP keepalive and TCP_USER_TIMEOUT). Unset: CHORUS_PEER_TIMEOUT, else kDefaultPeerTimeout;
  // zero: the kernel's defaults.
  std::optional<Duration> peer_timeout;
  // Bind the client's socket to this local address (a numeric literal, port 0) before
  // connecting; empty: the kernel picks. Selects the interface, or spreads many clients over
  // 127.0.0.0/8 so that they do not share one source address's ephemeral ports.
  std::string source_address;
};

// Client of a TcpStoreServer (and optionally its host). Thread-safe: threads share one
// connection with several requests in flight, so a thread waiting in get() never blocks another
// thread's set(). Every call blocks until answered or until its deadline: waiting calls (get,
// wait, multi_get) use their timeout argument, others default_timeout(). Throws TimeoutError
// (deadline passed; names the missing keys), NetworkError (connection lost: the call fails, the
// next call reconnects), StoreError (server refused, e.g. add on a non-integer value),
// InvalidArgument (key or value over the limits; nothing sent).
class CHORUS_API TcpStore final : public Store {
 public:
  // Starts the embedded server if is_server (may throw NetworkError: address in use), then
  // connects, retrying with exponential backoff and jitter (the server may start later), then
  // waits for wait_for_clients if set. Blocks at most options.timeout for each of connect and
  // wait_for_clients. Past it: TimeoutError naming host:port, the time waited and the last OS
  // error (also in ErrorContext: peer_address, elapsed, os_error).
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;  // closes the client; an embedded server stops last. Never throws.

  std::uint16_t port() const noexcept;       // the server's port (the chosen one with port 0)
  const std::string& host() const noexcept;  // as given in the options

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
  KeyWithOthers get_with(const std::string& key, const std::vector<std::string>& others,
                         std::optional<Duration> timeout = {}) override;
  using Store::set;
  std::optional<std::string> server_host() const override { return host(); }

  // Every key currently in the store, sorted (for inspection tools such as `chorus-store
  // keys`). Blocks up to default_timeout(); throws as above.
  std::vector<std::string> list_keys();
  // One round trip to the server; returns the time it took (millisecond resolution). Blocks up
  // to default_timeout(); throws as above.
  Duration ping();

 private:
  friend struct store::TcpStoreAccess;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
