// SPDX-License-Identifier: BSD-3-Clause
// The epoll TcpStore server: the loop and the connections (see tcp_store_server.hpp); and the
// public TcpStoreServer wrapper.
#include "store/tcp_store_server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "store/server_connection.hpp"

namespace chorus::store {
namespace {

constexpr int kMaxReadsPerEvent = 16;  // fairness: 1 MiB per wakeup per client
// Fairness: one connection's turn ends after this many requests or reply bytes; the rest of its
// buffered requests run after every other ready connection had its turn.
constexpr int kMaxRequestsPerTurn = 64;
constexpr std::size_t kMaxReplyBytesPerTurn = 4u << 20;
// Open fds kept for the process besides store connections (listener, epoll, logs, the rank).
constexpr std::size_t kFdReserve = 64;
constexpr int kMaxAcceptsPerEvent = 1024;
constexpr int kWarnsPerWindow = 10;
constexpr auto kWarnWindow = std::chrono::seconds(10);

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

Server::Server(const TcpStoreServerOptions& options) : options_(options) {
  if (!options.token.empty()) {
    check_token(options.token, "TcpStoreServerOptions::token");
  }
  limits_.max_key_bytes = options.max_key_bytes;
  limits_.max_value_bytes = options.max_value_bytes;
  // A reply carrying one maximal value must always be possible.
  options_.max_reply_bytes =
      std::max(options_.max_reply_bytes, options_.max_value_bytes + (64u << 10));
  options_.max_unread_reply_bytes = std::max<std::size_t>(options_.max_unread_reply_bytes, 1);
  // Any single reply must fit in the global budget with room to spare.
  options_.max_buffered_bytes = std::max(options_.max_buffered_bytes, 2 * options_.max_reply_bytes);
  budget_ = MemoryBudget(options_.max_buffered_bytes, options_.max_unread_reply_bytes);
  const std::uint64_t fd_limit = raise_open_file_limit(4096 + 64);
  max_connections_ = options.max_connections;
  if (max_connections_ == 0) {
    max_connections_ = fd_limit > 2 * kFdReserve ? static_cast<std::size_t>(fd_limit - kFdReserve)
                                                 : static_cast<std::size_t>(kFdReserve);
  }
  net::ListenOptions lo;
  lo.backlog = options.backlog;
  listener_ = net::Listener::bind(options.host, options.port, lo);
  port_ = listener_.port();
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  loop_.add(listener_.fd(), EPOLLIN, [this](std::uint32_t) { on_accept(); });
  const Duration shortest = std::min(options_.hello_timeout, options_.stall_timeout);
  const Duration period = std::clamp(shortest / 4, Duration(std::chrono::milliseconds(50)),
                                     Duration(std::chrono::seconds(1)));
  loop_.add_timer(Deadline::after(period), [this] { sweep(); });
  CHORUS_INFO(store, "store server listening on {} (at most {} connections)",
              listener_.address().to_string(), max_connections_);
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

void Server::sweep() {
  const auto now = Clock::now();
  std::vector<std::pair<std::uint64_t, std::string>> doomed;
  for (const auto& [id, c] : conns_) {
    if (!c->hello_done) {
      if (now - c->accepted_at > options_.hello_timeout) {
        doomed.emplace_back(id,
                            fmt::format("no handshake within {} of connecting (a port scanner, a "
                                        "health check, or a client that is not chorus)",
                                        format_duration(options_.hello_timeout)));
      }
    } else if (c->in.mid_frame() && !c->blocked && !c->in.frame_ready() &&
               now - c->last_input > options_.stall_timeout) {
      doomed.emplace_back(id,
                          fmt::format("a partial frame ({} bytes received) got no byte for {}",
                                      c->in.buffered(), format_duration(options_.stall_timeout)));
    } else if (!c->out.empty() && now - c->last_output > options_.stall_timeout) {
      doomed.emplace_back(id,
                          fmt::format("{} bytes of replies went unread for {}", c->out.pending(),
                                      format_duration(options_.stall_timeout)));
    }
  }
  for (const auto& [id, why] : doomed) {
    close_conn(id, "W", why);
  }
  const Duration shortest = std::min(options_.hello_timeout, options_.stall_timeout);
  const Duration period = std::clamp(shortest / 4, Duration(std::chrono::milliseconds(50)),
                                     Duration(std::chrono::seconds(1)));
  loop_.add_timer(Deadline::after(period), [this] { sweep(); });
}

bool Server::evict_idle_stranger(const char* why) {
  // Oldest first in each class: (0) no hello after a grace period (a connection accepted a
  // moment ago has not been read yet), (1) a hello and nothing since.
  const auto now = Clock::now();
  const auto grace = std::min<Duration>(options_.hello_timeout / 4, std::chrono::milliseconds(500));
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [id, c] : conns_) {
      if (pass == 0 ? !c->hello_done && now - c->accepted_at > grace
                    : c->hello_done && c->idle_stranger()) {
        close_conn(id, "W",
                   fmt::format("evicted to make room for a new connection ({}): it {} and was the "
                               "oldest such connection",
                               why,
                               c->hello_done ? "sent a handshake and nothing since"
                                             : "never sent a handshake"));
        return true;
      }
    }
  }
  // Then the partial frame that has waited longest for its next byte (slowloris), if it has
  // been idle for a while: a client uploading a value keeps sending.
  const Conn* stalest = nullptr;
  for (const auto& [id, c] : conns_) {
    if (c->in.mid_frame() && !c->blocked && !c->in.frame_ready() &&
        now - c->last_input > std::chrono::seconds(1) &&
        (stalest == nullptr || c->last_input < stalest->last_input)) {
      stalest = c.get();
    }
  }
  if (stalest != nullptr) {
    close_conn(stalest->id, "W",
               fmt::format("evicted to make room for a new connection ({}): its partial frame got "
                           "no byte for the longest time",
                           why));
    return true;
  }
  return false;
}

void Server::on_accept() {
  for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
    if (!accept_one()) {
      return;
    }
  }
}

bool Server::accept_one() {
  if (conns_.size() >= max_connections_ &&
      !evict_idle_stranger(fmt::format("{} connections, the limit", conns_.size()).c_str())) {
    // Everyone connected is busy: refuse the newcomer rather than an active client.
    net::AcceptResult drop = listener_.accept();
    if (drop.io.would_block()) {
      return false;
    }
    warn_bad_client(drop.io.ok() ? drop.peer.to_string() : std::string("(new connection)"),
                    fmt::format("refused: {} busy connections, the limit (max_connections); raise "
                                "it or the open file limit",
                                conns_.size()));
    return drop.io.ok();
  }
  net::AcceptResult a = listener_.accept();
  if (a.io.would_block()) {
    return false;
  }
  if (!a.io.ok()) {
    const int err = a.io.os_error;
    if (err == EMFILE || err == ENFILE) {
      // Out of fds before max_connections (the process holds other fds): make room by evicting
      // an idle stranger; failing that, free the spare fd to accept and drop the newcomer (the
      // pending connection would otherwise keep the listener readable forever).
      if (evict_idle_stranger("out of file descriptors")) {
        return true;
      }
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
      return false;
    }
    if (err == ECONNABORTED || err == EPROTO || err == ENOBUFS || err == ENOMEM) {
      return true;
    }
    CHORUS_WARN(store, "accept failed: {}", net::errno_name(err));
    return false;
  }
  auto c = std::make_unique<Conn>(limits_.max_request_frame());
  c->id = next_conn_++;
  c->peer = a.peer.to_string();
  c->socket = std::move(a.socket);
  c->accepted_at = c->last_input = c->last_output = Clock::now();
  try {
    // The loop drops events of a removed fd and close_conn removes it before the Conn dies, so
    // the callback may hold the Conn itself.
    loop_.add(c->socket.fd(), EPOLLIN,
              [this, conn = c.get()](std::uint32_t ev) { on_conn_event(*conn, ev); });
  } catch (const std::exception& e) {
    CHORUS_WARN(store, "dropping connection from {}: {}", c->peer, e.what());
    return true;
  }
  const std::uint64_t id = c->id;
  conns_.emplace(id, std::move(c));
  num_clients_.fetch_add(1, std::memory_order_relaxed);
  return true;
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
  ++closes_;
  budget_.release(id, c.accounted);
  conns_.erase(it);
  num_clients_.fetch_sub(1, std::memory_order_relaxed);
  budget_.trim_if_due();
  if (budget_.should_wake()) {
    wake_budget_waiters();
  }
}

void Server::account(Conn& c) {
  budget_.charge(c.accounted, c.in.footprint() + c.out.pending() + c.parked_bytes);
  if (budget_.should_wake()) {
    wake_budget_waiters();
  }
  if (c.out.empty()) {
    budget_.trim_if_due();
  }
}

void Server::wake_budget_waiters() {
  if (waiters_wake_posted_) {
    return;
  }
  waiters_wake_posted_ = true;
  loop_.post([this] {
    waiters_wake_posted_ = false;
    for (std::uint64_t id : budget_.take_waiters()) {
      auto it = conns_.find(id);
      if (it != conns_.end() && it->second->blocked && serve(*it->second)) {
        flush(*it->second);
      }
    }
  });
}

Server::Afford Server::afford(const Conn& c, std::size_t cost) const {
  return budget_.afford(c.unread(), c.out.pending(), cost);
}

void Server::block(Conn& c, Afford why, std::size_t cost) {
  c.blocked = true;
  if (why == Afford::server_full) {
    budget_.wait(c.id, cost);
  }
}

void Server::schedule_serve(Conn& c) {
  if (c.serve_scheduled) {
    return;
  }
  c.serve_scheduled = true;
  const std::uint64_t id = c.id;
  loop_.post([this, id] {
    auto it = conns_.find(id);
    if (it == conns_.end()) {
      return;
    }
    it->second->serve_scheduled = false;
    if (serve(*it->second)) {
      flush(*it->second);
    }
  });
}

void Server::update_interest(Conn& c) {
  account(c);
  const std::uint32_t want = (c.blocked ? 0u : static_cast<std::uint32_t>(EPOLLIN)) |
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
    if (r.bytes > 0) {
      c.last_output = Clock::now();
    }
  }
  // Blocked on its own unread replies: resume once half of the cap drained.
  if (c.blocked && !budget_.waiting(c.id) &&
      c.out.pending() <= options_.max_unread_reply_bytes / 2) {
    if (!serve(c)) {
      return false;
    }
    if (!c.out.empty()) {
      net::IoResult r = c.out.flush(c.socket);
      if (!r.ok()) {
        close_conn(c.id, "I", fmt::format("write failed: {}", r.describe()));
        return false;
      }
    }
  }
  update_interest(c);
  return true;
}

void Server::on_conn_event(Conn& c, std::uint32_t events) {
  const std::uint64_t id = c.id;
  if ((events & EPOLLOUT) != 0 && !flush(c)) {
    return;
  }
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) {
    if (c.blocked) {
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
    if (c.in.frame_ready()) {
      // Requests are still waiting for their turn: run them instead of buffering more.
      return serve(c);
    }
    if (c.in.buffered() >= MemoryBudget::kConnectionReserve && budget_.full()) {
      block(c, Afford::server_full,
            options_.max_buffered_bytes / 4);  // a large upload waits until the global budget frees
      return true;
    }
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
    c.last_input = Clock::now();
    if (!c.hello_done && !handle_hello(c)) {
      return false;
    }
    if (!serve(c)) {
      return false;
    }
    // A read that did not fill the chunk emptied the socket: another read would only say
    // EAGAIN (one wasted syscall per request); epoll reports the next bytes.
    if (c.blocked || r.bytes < net::FrameReader::kReadChunk) {
      break;
    }
  }
  c.in.shrink_if_idle();
  return true;
}

bool Server::serve(Conn& c) {
  const std::uint64_t id = c.id;
  c.blocked = false;
  budget_.stop_waiting(id);  // blocks again below if the budget still says no
  // Ready replies of parked requests first: they were asked before anything still buffered.
  while (!c.deferred.empty()) {
    const std::size_t cost = parked_cost(*c.deferred.front());
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      block(c, a, cost);
      return true;
    }
    std::unique_ptr<Parked> p = std::move(c.deferred.front());
    c.deferred.pop_front();
    c.parked_bytes -= p->bytes;
    deliver(c, *p);
  }
  int requests = 0;
  const std::size_t out_before = c.out.pending();
  const std::uint64_t closes = closes_;
  while (c.hello_done) {
    if (requests >= kMaxRequestsPerTurn || c.out.pending() >= out_before + kMaxReplyBytesPerTurn) {
      if (c.in.frame_ready()) {
        schedule_serve(c);  // the rest after the other connections had their turn
      }
      break;
    }
    std::span<const std::uint8_t> payload;
    const auto status = c.in.peek(payload);
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
    SimpleRequest simple;
    if (decode_simple_request(payload, limits_, simple)) {
      const Simple done = serve_simple(c, simple);
      if (done == Simple::blocked) {
        return true;
      }
      if (done == Simple::served) {
        ++requests;
        if (closes_ != closes && conns_.find(id) == conns_.end()) {
          return false;
        }
        continue;
      }
    }
    Request q;
    DecodeError err;
    if (!decode_request(payload, limits_, q, err)) {
      close_conn(id, "W", fmt::format("malformed request: {}", err.message));
      return false;
    }
    // Budget before building: a request whose reply the connection cannot afford stays
    // buffered, and the connection is not read until replies drain or the budget frees.
    const std::size_t cost = priced_as_sent(reply_cost(q));
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      block(c, a, cost);
      return true;
    }
    c.in.pop();
    c.did_request = true;
    ++requests;
    handle_request(c, q);
    if (closes_ != closes && conns_.find(id) == conns_.end()) {
      return false;
    }
  }
  return true;
}

bool Server::handle_hello(Conn& c) {
  std::string why;
  switch (c.handshake.advance(c.in, c.socket, c.out, options_.token, why)) {
    case ServerHandshake::Step::need_more:
      return true;
    case ServerHandshake::Step::refused:
      close_conn(c.id, "W", why);
      return false;
    case ServerHandshake::Step::done:
      handshake_done(c);
      return true;
  }
  return true;
}

void Server::handshake_done(Conn& c) {
  c.hello_done = true;
  if (c.handshake.member()) {
    ++members_joined_;
    check_client_waits();
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
