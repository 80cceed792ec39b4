// SPDX-License-Identifier: BSD-3-Clause
// The epoll TcpStore server and the public TcpStoreServer wrapper.
#include "store/tcp_store_server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_set>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"

namespace chorus::store {
namespace {

constexpr std::size_t kMaxPendingOutput = 64u << 20;   // stop reading a client that does not read
constexpr int kMaxReadsPerEvent = 16;                  // fairness: 1 MiB per wakeup per client
constexpr int kMaxAcceptsPerEvent = 1024;
constexpr int kWarnsPerWindow = 10;
constexpr auto kWarnWindow = std::chrono::seconds(10);

std::string printable_prefix(const std::uint8_t* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = static_cast<char>(p[i]);
    if (c >= 32 && c < 127) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", p[i]);
    }
  }
  return out;
}

Duration clamp_ms(std::uint64_t ms) {
  constexpr std::uint64_t kMax = std::uint64_t{1} << 60;
  return Duration(static_cast<Duration::rep>(std::min(ms, kMax)));
}

}  // namespace

std::uint64_t raise_open_file_limit(std::uint64_t want) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    return 0;
  }
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      CHORUS_INFO(store, "raised the open file limit from {} to {} (the hard limit)", rl.rlim_cur,
                  rl.rlim_max);
      rl = raised;
    }
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    CHORUS_WARN(store,
                "the open file limit is {} (hard limit {}), so this store server can hold fewer "
                "than {} clients; raise it (ulimit -n, or LimitNOFILE= in systemd) before "
                "bootstrapping a large job",
                rl.rlim_cur, rl.rlim_max, want);
  }
  return rl.rlim_cur;
}

struct Server::Conn {
  explicit Conn(std::size_t max_frame) : in(max_frame) {}
  std::uint64_t id = 0;
  net::Socket socket;
  std::string peer;
  net::FrameReader in;
  net::OutputQueue out;
  bool hello_done = false;
  bool read_paused = false;
  std::uint32_t interest = EPOLLIN;
  std::unordered_set<KvTable::WatchId> watches;
  std::unordered_set<std::uint64_t> client_waits;
};

struct Server::Parked {
  std::uint64_t conn = 0;
  std::uint32_t request_id = 0;
  Op op = Op::get;
  std::vector<std::string> keys;
  net::EventLoop::TimerId timer = 0;
};

Server::Server(const TcpStoreServerOptions& options) : options_(options) {
  limits_.max_key_bytes = options.max_key_bytes;
  limits_.max_value_bytes = options.max_value_bytes;
  raise_open_file_limit(4096 + 64);
  net::ListenOptions lo;
  lo.backlog = options.backlog;
  listener_ = net::Listener::bind(options.host, options.port, lo);
  port_ = listener_.port();
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  loop_.add(listener_.fd(), EPOLLIN, [this](std::uint32_t) { on_accept(); });
  CHORUS_INFO(store, "store server listening on {}", listener_.address().to_string());
  thread_ = std::thread([this] {
    log::set_thread_context(fmt::format("store :{}", port_));
    loop_.run();
  });
}

Server::~Server() {
  loop_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
  for (auto& [id, c] : conns_) {
    loop_.remove(c->socket.fd());
  }
  conns_.clear();
  loop_.remove(listener_.fd());
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
  }
}

void Server::warn_bad_client(const std::string& peer, const std::string& reason) {
  const auto now = Clock::now();
  if (now - warn_window_ > kWarnWindow) {
    if (warns_suppressed_ > 0) {
      CHORUS_WARN(store, "{} more connections were closed for bad input in the last {} s",
                  warns_suppressed_,
                  std::chrono::duration_cast<std::chrono::seconds>(kWarnWindow).count());
    }
    warn_window_ = now;
    warns_in_window_ = 0;
    warns_suppressed_ = 0;
  }
  if (warns_in_window_++ < kWarnsPerWindow) {
    CHORUS_WARN(store, "closing connection from {}: {}", peer, reason);
  } else {
    ++warns_suppressed_;
  }
}

void Server::on_accept() {
  for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
    net::AcceptResult a = listener_.accept();
    if (a.io.would_block()) {
      return;
    }
    if (!a.io.ok()) {
      const int err = a.io.os_error;
      if (err == EMFILE || err == ENFILE) {
        // Out of fds: the pending connection would keep the listener readable forever. Free the
        // spare fd, accept and drop the connection (the client sees a reset and retries).
        if (spare_fd_ >= 0) {
          ::close(spare_fd_);
          spare_fd_ = -1;
          net::AcceptResult drop = listener_.accept();
          (void)drop;
          spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        warn_bad_client("(new connection)",
                        fmt::format("out of file descriptors with {} clients connected: {}; "
                                    "raise the open file limit (ulimit -n)",
                                    conns_.size(), net::errno_name(err)));
        return;
      }
      if (err == ECONNABORTED || err == EPROTO || err == ENOBUFS || err == ENOMEM) {
        continue;
      }
      CHORUS_WARN(store, "accept failed: {}", net::errno_name(err));
      return;
    }
    auto c = std::make_unique<Conn>(limits_.max_request_frame());
    c->id = next_conn_++;
    c->peer = a.peer.to_string();
    c->socket = std::move(a.socket);
    const std::uint64_t id = c->id;
    try {
      loop_.add(c->socket.fd(), EPOLLIN, [this, id](std::uint32_t ev) { on_conn_event(id, ev); });
    } catch (const std::exception& e) {
      CHORUS_WARN(store, "dropping connection from {}: {}", c->peer, e.what());
      continue;
    }
    conns_.emplace(id, std::move(c));
    num_clients_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Server::close_conn(std::uint64_t id, const char* level, const std::string& reason) {
  auto it = conns_.find(id);
  if (it == conns_.end()) {
    return;
  }
  Conn& c = *it->second;
  if (level[0] == 'W') {
    warn_bad_client(c.peer, reason);
  } else {
    CHORUS_INFO(store, "connection from {} closed: {}", c.peer, reason);
  }
  for (KvTable::WatchId w : c.watches) {
    table_.remove_watch(w);
    auto p = parked_.find(w);
    if (p != parked_.end()) {
      loop_.cancel_timer(p->second->timer);
      parked_.erase(p);
    }
  }
  for (std::uint64_t w : c.client_waits) {
    auto cw = client_waits_.find(w);
    if (cw != client_waits_.end()) {
      loop_.cancel_timer(cw->second.timer);
      client_waits_.erase(cw);
    }
  }
  loop_.remove(c.socket.fd());
  conns_.erase(it);
  num_clients_.fetch_sub(1, std::memory_order_relaxed);
}

void Server::update_interest(Conn& c) {
  const std::uint32_t want = (c.read_paused ? 0u : static_cast<std::uint32_t>(EPOLLIN)) |
                             (c.out.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (want != c.interest) {
    c.interest = want;
    loop_.modify(c.socket.fd(), want);
  }
}

bool Server::flush(Conn& c) {
  if (!c.out.empty()) {
    net::IoResult r = c.out.flush(c.socket);
    if (!r.ok()) {
      close_conn(c.id, "I", fmt::format("write failed: {}", r.describe()));
      return false;
    }
  }
  if (c.read_paused && c.out.pending() < kMaxPendingOutput / 2) {
    c.read_paused = false;
  }
  update_interest(c);
  return true;
}

void Server::on_conn_event(std::uint64_t id, std::uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) {
    return;
  }
  Conn& c = *it->second;
  if ((events & EPOLLOUT) != 0 && !flush(c)) {
    return;
  }
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) {
    if (c.read_paused) {
      if ((events & (EPOLLERR | EPOLLHUP)) != 0) {
        close_conn(id, "I", "hung up while replies were pending");
      }
      return;
    }
    if (!read_conn(c)) {
      return;
    }
    flush(c);
  }
}

bool Server::read_conn(Conn& c) {
  const std::uint64_t id = c.id;
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    net::IoResult r = c.in.read_from(c.socket);
    if (r.would_block()) {
      break;
    }
    if (r.closed() || r.error()) {
      const std::string what = r.closed() ? "the client closed the connection" : r.describe();
      if (c.in.mid_frame()) {
        close_conn(id, "W",
                   fmt::format("{} in the middle of a {} ({} bytes received)", what,
                               c.hello_done ? "frame" : "handshake", c.in.buffered()));
      } else {
        close_conn(id, "I", what);
      }
      return false;
    }
    if (!c.hello_done && !handle_hello(c)) {
      return false;
    }
    while (c.hello_done) {
      std::span<const std::uint8_t> payload;
      const auto status = c.in.next(payload);
      if (status == net::FrameReader::Status::need_more) {
        break;
      }
      if (status == net::FrameReader::Status::too_large) {
        close_conn(id, "W",
                   fmt::format("frame length {} exceeds the limit of {} bytes (max value {} + "
                               "keys); a client with larger values needs a server started with a "
                               "larger max_value_bytes",
                               c.in.announced(), c.in.max_frame_bytes(), limits_.max_value_bytes));
        return false;
      }
      Request q;
      DecodeError err;
      if (!decode_request(payload, limits_, q, err)) {
        close_conn(id, "W", fmt::format("malformed request: {}", err.message));
        return false;
      }
      handle_request(c, q);
      if (conns_.find(id) == conns_.end()) {
        return false;
      }
    }
    if (c.out.pending() >= kMaxPendingOutput) {
      c.read_paused = true;  // resumes once the client reads its replies (flush)
      break;
    }
  }
  c.in.shrink_if_idle();
  return true;
}

bool Server::handle_hello(Conn& c) {
  if (c.in.buffered() < kHelloBytes) {
    return true;
  }
  std::uint8_t raw[kHelloBytes];
  (void)c.in.take_raw(raw, kHelloBytes);
  const auto hello = decode_hello(raw);
  if (!hello) {
    close_conn(c.id, "W",
               fmt::format("wrong magic '{}' (expected 'CHST'): not a chorus store client, or an "
                           "incompatible one",
                           printable_prefix(raw, kHelloBytes)));
    return false;
  }
  std::uint8_t answer[kHelloBytes];
  if (hello->version != kProtocolVersion) {
    encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::unsupported_version)},
                 answer);
    (void)c.socket.write(answer, kHelloBytes);  // best effort: tell the client why
    close_conn(c.id, "W",
               fmt::format("client speaks store protocol version {}, this server speaks {}; use "
                           "the same chorus version on both sides",
                           hello->version, kProtocolVersion));
    return false;
  }
  encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::accepted)}, answer);
  c.out.push(std::vector<std::uint8_t>(answer, answer + kHelloBytes));
  c.hello_done = true;
  if ((hello->flags & kHelloFlagMember) != 0) {
    ++members_joined_;
    check_client_waits();
  }
  return true;
}

void Server::reply(Conn& c, Op op, const Reply& r) {
  std::vector<std::uint8_t> buf;
  encode_reply(op, r, buf);
  c.out.push(std::move(buf));
}

void Server::park(Conn& c, const Request& q, Op op) {
  const KvTable::WatchId w = table_.add_watch(q.keys);
  if (w == 0) {
    // Cannot happen (callers check first), but answering is always safe.
    Reply r;
    r.id = q.id;
    for (const auto& k : q.keys) {
      r.values.push_back(*table_.find(k));
    }
    if (op == Op::get) {
      r.values.resize(1);
    }
    reply(c, op, r);
    return;
  }
  auto p = std::make_unique<Parked>();
  p->conn = c.id;
  p->request_id = q.id;
  p->op = op;
  p->keys = q.keys;
  p->timer = loop_.add_timer(Deadline::after(clamp_ms(q.timeout_ms)),
                             [this, w] { on_watch_timeout(w); });
  parked_.emplace(w, std::move(p));
  c.watches.insert(w);
}

void Server::on_watch_timeout(KvTable::WatchId w) {
  auto p = parked_.find(w);
  if (p == parked_.end()) {
    return;
  }
  std::unique_ptr<Parked> parked = std::move(p->second);
  parked_.erase(p);
  table_.remove_watch(w);
  auto it = conns_.find(parked->conn);
  if (it == conns_.end()) {
    return;
  }
  Conn& c = *it->second;
  c.watches.erase(w);
  Reply r;
  r.status = ReplyStatus::timeout;
  r.id = parked->request_id;
  r.keys = table_.missing(parked->keys);
  reply(c, parked->op, r);
  flush(c);
}

void Server::deliver_ready() {
  for (KvTable::WatchId w : table_.take_ready()) {
    auto p = parked_.find(w);
    if (p == parked_.end()) {
      continue;
    }
    std::unique_ptr<Parked> parked = std::move(p->second);
    parked_.erase(p);
    loop_.cancel_timer(parked->timer);
    auto it = conns_.find(parked->conn);
    if (it == conns_.end()) {
      continue;
    }
    Conn& c = *it->second;
    c.watches.erase(w);
    Reply r;
    r.id = parked->request_id;
    if (parked->op != Op::wait) {
      for (const auto& k : parked->keys) {
        const Bytes* v = table_.find(k);
        r.values.push_back(v != nullptr ? *v : Bytes{});
      }
    }
    reply(c, parked->op, r);
    flush(c);
  }
}

void Server::check_client_waits() {
  std::vector<std::uint64_t> done;
  for (const auto& [wid, cw] : client_waits_) {
    if (members_joined_ >= static_cast<std::int64_t>(cw.count)) {
      done.push_back(wid);
    }
  }
  for (std::uint64_t wid : done) {
    ClientWait cw = client_waits_.at(wid);
    client_waits_.erase(wid);
    loop_.cancel_timer(cw.timer);
    auto it = conns_.find(cw.conn);
    if (it == conns_.end()) {
      continue;
    }
    it->second->client_waits.erase(wid);
    Reply r;
    r.id = cw.request_id;
    r.integer = members_joined_;
    reply(*it->second, Op::wait_clients, r);
    flush(*it->second);
  }
}

void Server::handle_request(Conn& c, Request& q) {
  Reply r;
  r.id = q.id;
  bool mutated = false;
  switch (q.op) {
    case Op::set:
      table_.set(q.keys[0], std::move(q.values[0]));
      mutated = true;
      break;
    case Op::get:
    case Op::multi_get:
    case Op::wait: {
      const auto missing = table_.missing(q.keys);
      if (!missing.empty()) {
        if (q.timeout_ms == 0) {
          r.status = ReplyStatus::timeout;
          r.keys = missing;
          break;
        }
        park(c, q, q.op);
        return;
      }
      if (q.op != Op::wait) {
        for (const auto& k : q.keys) {
          r.values.push_back(*table_.find(k));
        }
      }
      break;
    }
    case Op::add: {
      auto v = table_.add(q.keys[0], q.delta);
      if (!v) {
        r.status = ReplyStatus::error;
        r.error = ErrorKind::not_integer;
        r.message = fmt::format(
            "add('{}'): the key holds '{}', not an integer counter; use a key only as a counter "
            "or only with set()",
            q.keys[0], printable_prefix(table_.find(q.keys[0])->data(),
                                        std::min<std::size_t>(table_.find(q.keys[0])->size(), 32)));
      } else {
        r.integer = *v;
        mutated = true;
      }
      break;
    }
    case Op::compare_set:
      r.values.push_back(table_.compare_set(q.keys[0], q.values[0], std::move(q.values[1])));
      mutated = true;
      break;
    case Op::check:
      r.flag = table_.missing(q.keys).empty();
      break;
    case Op::delete_key:
      r.flag = table_.erase(q.keys[0]);
      break;
    case Op::num_keys:
      r.integer = static_cast<std::int64_t>(table_.size());
      break;
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size(); ++i) {
        table_.set(q.keys[i], std::move(q.values[i]));
      }
      mutated = true;
      break;
    case Op::append:
      table_.append(q.keys[0], q.values[0]);
      mutated = true;
      break;
    case Op::list_keys:
      r.keys = table_.keys();
      break;
    case Op::ping:
      break;
    case Op::wait_clients:
      if (members_joined_ >= static_cast<std::int64_t>(q.count)) {
        r.integer = members_joined_;
        break;
      }
      if (q.timeout_ms == 0) {
        r.status = ReplyStatus::timeout;
        r.message = fmt::format("{} of {} clients joined", members_joined_, q.count);
        break;
      }
      {
        const std::uint64_t wid = next_client_wait_++;
        const std::uint64_t conn = c.id;
        const std::uint32_t rid = q.id;
        const std::uint32_t count = q.count;
        const auto timer = loop_.add_timer(
            Deadline::after(clamp_ms(q.timeout_ms)), [this, wid, conn, rid, count] {
              client_waits_.erase(wid);
              auto it = conns_.find(conn);
              if (it == conns_.end()) {
                return;
              }
              it->second->client_waits.erase(wid);
              Reply t;
              t.status = ReplyStatus::timeout;
              t.id = rid;
              t.message = fmt::format("{} of {} clients joined", members_joined_, count);
              reply(*it->second, Op::wait_clients, t);
              flush(*it->second);
            });
        client_waits_.emplace(wid, ClientWait{conn, rid, count, timer});
        c.client_waits.insert(wid);
      }
      return;
  }
  reply(c, q.op, r);
  if (mutated) {
    deliver_ready();
  }
}

}  // namespace chorus::store

namespace chorus {

class TcpStoreServer::Impl {
 public:
  explicit Impl(const TcpStoreServerOptions& options) : server(options) {}
  store::Server server;
};

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
TcpStoreServer::~TcpStoreServer() = default;
std::uint16_t TcpStoreServer::port() const noexcept { return impl_->server.port(); }
std::size_t TcpStoreServer::num_clients() const { return impl_->server.num_clients(); }

}  // namespace chorus
