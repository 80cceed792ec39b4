// SPDX-License-Identifier: BSD-3-Clause
// TcpStore façade: optional embedded server, one client connection, errors worded for users.
#include <chorus/tcp_store.hpp>

#include <algorithm>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/format.hpp"
#include "net/address.hpp"
#include "store/missing_keys.hpp"
#include "store/store_auth.hpp"
#include "store/store_token.hpp"
#include "store/tcp_store_client.hpp"
#include "store/tcp_store_server.hpp"

namespace chorus {
namespace {

std::string connect_host_for(const std::string& bind_host) {
  if (bind_host.empty() || bind_host == "0.0.0.0") {
    return "127.0.0.1";
  }
  if (bind_host == "::") {
    return "::1";
  }
  return bind_host;
}

}  // namespace

class TcpStore::Impl {
 public:
  Impl(const TcpStoreOptions& options, Duration timeout) : host(options.host) {
    limits.max_key_bytes = options.max_key_bytes;
    limits.max_value_bytes = options.max_value_bytes;
    // Whatever the option says, a reply carrying one maximal value must fit.
    limits.max_reply_bytes =
        std::max(options.max_reply_bytes, limits.max_value_bytes + (64u << 10));
    std::string connect_host = options.host;
    port = options.port;
    std::string token = options.token ? *options.token : store::token_from_env();
    if (!token.empty()) {
      store::check_token(token, "TcpStoreOptions::token");
    }
    if (options.is_server) {
      TcpStoreServerOptions so;
      so.host = options.host;
      so.port = options.port;
      so.max_key_bytes = options.max_key_bytes;
      so.max_value_bytes = options.max_value_bytes;
      so.token = token;
      server = std::make_unique<store::Server>(so);
      port = server->port();
      connect_host = connect_host_for(options.host);
    }
    net::SocketAddress local;
    if (!options.source_address.empty()) {
      auto parsed = net::SocketAddress::parse_numeric(options.source_address, 0);
      if (!parsed) {
        throw InvalidArgument(
            fmt::format("TcpStoreOptions::source_address must be a numeric address (\"127.0.0.2\", "
                        "\"::1\"), got \"{}\"",
                        options.source_address));
      }
      local = *parsed;
    }
    client = std::make_unique<store::Client>(
        connect_host, port, limits, Deadline::after(timeout), options.counts_as_client,
        std::move(token), env::resolve_peer_timeout(options.peer_timeout), local);
  }

  // Declared first: destroyed last, after the client disconnected.
  std::unique_ptr<store::Server> server;
  std::unique_ptr<store::Client> client;
  std::string host;
  std::uint16_t port = 0;
  store::Limits limits;
};

namespace {

ErrorContext context_for(const store::Client& c, store::Op op, Duration timeout) {
  ErrorContext ctx;
  ctx.op = fmt::format("store.{}", store::to_string(op));
  ctx.peer_address = c.address();
  ctx.timeout = timeout;
  ctx.elapsed = timeout;
  return ctx;
}

// Turns a timeout/error reply into the matching exception.
void check_reply(const store::Client& c, store::Op op, const store::Reply& r, Duration timeout) {
  using store::ReplyStatus;
  if (r.status == ReplyStatus::ok) {
    return;
  }
  ErrorContext ctx = context_for(c, op, timeout);
  if (r.status == ReplyStatus::timeout) {
    if (op == store::Op::wait_clients) {
      throw TimeoutError(fmt::format("TcpStore at {}: only {} within {}; the missing ranks have "
                                     "not started or cannot reach this address: check them, or "
                                     "raise the timeout",
                                     c.address(), r.message, format_duration(timeout)),
                         ctx);
    }
    throw TimeoutError(
        fmt::format("store {} on {} timed out after {}: still missing {}; the process that sets "
                    "them has not arrived (slow, crashed, or using another key name): check it, "
                    "or raise the timeout (CHORUS_TIMEOUT)",
                    store::to_string(op), c.address(), format_duration(timeout),
                    store::quote_keys(r.keys)),
        ctx);
  }
  ctx.elapsed = Duration(0);
  throw StoreError(
      fmt::format("store {} on {} refused: {}", store::to_string(op), c.address(), r.message), ctx);
}

}  // namespace

TcpStore::TcpStore(const TcpStoreOptions& options) : Store(options.timeout) {
  impl_ = std::make_unique<Impl>(options, default_timeout());
  if (options.wait_for_clients) {
    const int n = *options.wait_for_clients;
    if (n < 1) {
      throw InvalidArgument(
          fmt::format("TcpStoreOptions::wait_for_clients = {}; it must be >= 1", n));
    }
    store::Request q;
    q.op = store::Op::wait_clients;
    q.count = static_cast<std::uint32_t>(n);
    q.timeout_ms = static_cast<std::uint64_t>(default_timeout().count());
    const store::Reply r = impl_->client->call(q, Deadline::after(default_timeout()));
    check_reply(*impl_->client, q.op, r, default_timeout());
  }
}

TcpStore::~TcpStore() = default;

std::uint16_t TcpStore::port() const noexcept { return impl_->port; }

std::string store::TcpStoreAccess::token(const TcpStore& s) { return s.impl_->client->token(); }
const std::string& TcpStore::host() const noexcept { return impl_->host; }

namespace {

void check_key(const store::Limits& limits, const std::string& key) {
  if (key.size() > limits.max_key_bytes) {
    throw InvalidArgument(fmt::format(
        "store key of {} bytes exceeds the limit of {} bytes (TcpStoreOptions::max_key_bytes); "
        "use a shorter key",
        key.size(), limits.max_key_bytes));
  }
}

void check_value(const store::Limits& limits, const Bytes& value) {
  if (value.size() > limits.max_value_bytes) {
    throw InvalidArgument(fmt::format(
        "store value of {} exceeds the limit of {} (max_value_bytes of the client and server); "
        "split it, or raise the limit on both sides",
        format_bytes(value.size()), format_bytes(limits.max_value_bytes)));
  }
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  check_key(impl_->limits, key);
  check_value(impl_->limits, value);
  store::Request q;
  q.op = store::Op::set;
  q.keys = {key};
  q.values = {value};
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
}

Bytes TcpStore::get(const std::string& key, std::optional<Duration> timeout) {
  check_key(impl_->limits, key);
  const Duration t = resolve_timeout(timeout);
  store::Request q;
  q.op = store::Op::get;
  q.keys = {key};
  q.timeout_ms = static_cast<std::uint64_t>(std::max<Duration::rep>(t.count(), 0));
  auto r = impl_->client->call(q, Deadline::after(t));
  check_reply(*impl_->client, q.op, r, t);
  return std::move(r.values.at(0));
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  check_key(impl_->limits, key);
  store::Request q;
  q.op = store::Op::add;
  q.keys = {key};
  q.delta = delta;
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return r.integer;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_key(impl_->limits, key);
  check_value(impl_->limits, expected);
  check_value(impl_->limits, desired);
  if (expected.size() + desired.size() > impl_->limits.max_value_bytes) {
    throw InvalidArgument(fmt::format(
        "compare_set: expected + desired values total {}, above the {} a request may carry",
        format_bytes(expected.size() + desired.size()),
        format_bytes(impl_->limits.max_value_bytes)));
  }
  store::Request q;
  q.op = store::Op::compare_set;
  q.keys = {key};
  q.values = {expected, desired};
  auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return std::move(r.values.at(0));
}

void TcpStore::wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  for (const auto& k : keys) {
    check_key(impl_->limits, k);
  }
  const Duration t = resolve_timeout(timeout);
  store::Request q;
  q.op = store::Op::wait;
  q.keys = keys;
  q.timeout_ms = static_cast<std::uint64_t>(std::max<Duration::rep>(t.count(), 0));
  const auto r = impl_->client->call(q, Deadline::after(t));
  check_reply(*impl_->client, q.op, r, t);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    check_key(impl_->limits, k);
  }
  store::Request q;
  q.op = store::Op::check;
  q.keys = keys;
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return r.flag;
}

bool TcpStore::delete_key(const std::string& key) {
  check_key(impl_->limits, key);
  store::Request q;
  q.op = store::Op::delete_key;
  q.keys = {key};
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return r.flag;
}

std::int64_t TcpStore::num_keys() {
  store::Request q;
  q.op = store::Op::num_keys;
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return r.integer;
}

std::vector<Bytes> TcpStore::multi_get(const std::vector<std::string>& keys,
                                       std::optional<Duration> timeout) {
  const Duration t = resolve_timeout(timeout);
  const Deadline deadline = Deadline::after(t);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  // Requests stay under the server's frame limit: split very long key lists.
  const std::size_t budget = impl_->limits.max_request_frame() - 4096;
  std::size_t first = 0;
  while (first < keys.size() || (keys.empty() && first == 0)) {
    store::Request q;
    q.op = store::Op::multi_get;
    std::size_t bytes = 0;
    while (first < keys.size() && (q.keys.empty() || bytes + keys[first].size() + 4 <= budget)) {
      check_key(impl_->limits, keys[first]);
      bytes += keys[first].size() + 4;
      q.keys.push_back(keys[first++]);
    }
    const Duration left = deadline.remaining();
    q.timeout_ms = static_cast<std::uint64_t>(left.count());
    auto r = impl_->client->call(q, deadline);
    check_reply(*impl_->client, q.op, r, t);
    for (auto& v : r.values) {
      values.push_back(std::move(v));
    }
    if (keys.empty()) {
      break;
    }
  }
  return values;
}

KeyWithOthers TcpStore::get_with(const std::string& key, const std::vector<std::string>& others,
                                 std::optional<Duration> timeout) {
  check_key(impl_->limits, key);
  const Duration t = resolve_timeout(timeout);
  store::Request q;
  q.op = store::Op::get_with;
  q.keys.reserve(others.size() + 1);
  q.keys.push_back(key);
  for (const auto& other : others) {
    check_key(impl_->limits, other);
    q.keys.push_back(other);
  }
  q.timeout_ms = static_cast<std::uint64_t>(std::max<Duration::rep>(t.count(), 0));
  auto r = impl_->client->call(q, Deadline::after(t));
  check_reply(*impl_->client, q.op, r, t);
  if (r.values.size() != q.keys.size() || r.present.size() != q.keys.size()) {
    throw StoreError(
        fmt::format("store get_with to {}: the server answered {} values for {} keys; "
                    "it is not a chorus store server of this version",
                    impl_->client->address(), r.values.size(), q.keys.size()));
  }
  KeyWithOthers out;
  out.value = std::move(r.values.at(0));
  out.others.reserve(others.size());
  for (std::size_t i = 1; i < r.values.size(); ++i) {
    out.others.push_back(r.present.at(i) ? std::optional<Bytes>(std::move(r.values[i]))
                                         : std::nullopt);
  }
  return out;
}

void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw InvalidArgument(fmt::format("multi_set: {} keys but {} values; pass one value per key",
                                      keys.size(), values.size()));
  }
  const std::size_t budget = impl_->limits.max_request_frame() - 4096;
  std::size_t first = 0;
  while (first < keys.size()) {
    store::Request q;
    q.op = store::Op::multi_set;
    std::size_t bytes = 0;
    while (first < keys.size()) {
      check_key(impl_->limits, keys[first]);
      check_value(impl_->limits, values[first]);
      const std::size_t item = keys[first].size() + values[first].size() + 8;
      if (!q.keys.empty() && bytes + item > budget) {
        break;
      }
      bytes += item;
      q.keys.push_back(keys[first]);
      q.values.push_back(values[first]);
      ++first;
    }
    const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
    check_reply(*impl_->client, q.op, r, default_timeout());
  }
}

void TcpStore::append(const std::string& key, const Bytes& value) {
  check_key(impl_->limits, key);
  check_value(impl_->limits, value);
  store::Request q;
  q.op = store::Op::append;
  q.keys = {key};
  q.values = {value};
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
}

std::vector<std::string> TcpStore::list_keys() {
  store::Request q;
  q.op = store::Op::list_keys;
  auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return std::move(r.keys);
}

Duration TcpStore::ping() {
  store::Request q;
  q.op = store::Op::ping;
  const auto start = Clock::now();
  const auto r = impl_->client->call(q, Deadline::after(default_timeout()));
  check_reply(*impl_->client, q.op, r, default_timeout());
  return std::chrono::duration_cast<Duration>(Clock::now() - start);
}

}  // namespace chorus
