// SPDX-License-Identifier: BSD-3-Clause
// The epoll TcpStore server and the public TcpStoreServer wrapper.
#include "store/tcp_store_server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <unordered_set>

#include <malloc.h>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/bytes.hpp"
#include "core/format.hpp"
#include "core/logging.hpp"
#include "store/store_auth.hpp"

namespace chorus::store {
namespace {

constexpr int kMaxReadsPerEvent = 16;  // fairness: 1 MiB per wakeup per client
// Fairness: one connection's turn ends after this many requests or reply bytes; the rest of its
// buffered requests run after every other ready connection had its turn.
constexpr int kMaxRequestsPerTurn = 64;
constexpr std::size_t kMaxReplyBytesPerTurn = 4u << 20;
// Small replies up to this much per connection are served even when the global budget is spent,
// so that a good client's ping is answered while strangers hold the budget.
constexpr std::size_t kConnectionReserve = 64u << 10;
// A reply estimate for requests whose reply is a status and a few integers.
constexpr std::size_t kSmallReply = 64;
// Parked (waiting) requests per connection: one per client thread is the normal case.
constexpr std::size_t kMaxParkedPerConnection = 4096;
// Open fds kept for the process besides store connections (listener, epoll, logs, the rank).
constexpr std::size_t kFdReserve = 64;
// Released heap is returned to the OS (malloc_trim) after this much was freed.
constexpr std::size_t kTrimAfterFreed = 32u << 20;
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

struct Server::Parked {
  std::uint64_t conn = 0;
  std::uint32_t request_id = 0;
  Op op = Op::get;
  std::vector<std::string> keys;
  net::EventLoop::TimerId timer = 0;
  std::size_t bytes = 0;  // memory it holds (keys), counted in its connection's budget
};

struct Server::Conn {
  explicit Conn(std::size_t max_frame) : in(max_frame) {}
  std::uint64_t id = 0;
  net::Socket socket;
  std::string peer;
  net::FrameReader in;
  net::OutputQueue out;
  bool hello_done = false;     // handshake complete (authenticated, if the server has a token)
  bool awaiting_auth = false;  // challenge sent, the client's proof not read yet
  Nonce challenge{};
  bool member = false;       // counts toward wait_for_clients once the handshake is done
  bool did_request = false;  // sent at least one frame after its hello
  bool blocked = false;      // waiting for its replies to drain or for the global budget
  bool serve_scheduled = false;
  std::uint32_t interest = EPOLLIN;
  Clock::time_point accepted_at{};
  Clock::time_point last_input{};   // last byte received
  Clock::time_point last_output{};  // last byte sent, or when output started waiting
  std::size_t parked_bytes = 0;     // Parked::bytes of its watches and deferred deliveries
  std::size_t accounted = 0;        // its share of Server::buffered_
  std::unordered_set<KvTable::WatchId> watches;
  std::unordered_set<std::uint64_t> client_waits;
  std::deque<std::unique_ptr<Parked>> deferred;  // ready replies waiting for budget

  std::size_t unread() const noexcept { return out.pending() + parked_bytes; }
  // Idle strangers are evicted first at the connection limit: no hello yet, or a hello and
  // nothing else (a port scanner, a health check, an attacker holding fds).
  bool idle_stranger() const noexcept {
    return !hello_done || (!did_request && watches.empty() && client_waits.empty() && out.empty() &&
                           deferred.empty() && !in.mid_frame());
  }
};

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
  buffered_ -= c.accounted;
  freed_since_trim_ += c.accounted;
  budget_waiters_.erase(id);
  conns_.erase(it);
  num_clients_.fetch_sub(1, std::memory_order_relaxed);
  if (freed_since_trim_ >= kTrimAfterFreed) {
    freed_since_trim_ = 0;
    ::malloc_trim(0);  // hand large freed buffers back to the OS: RSS follows the budget
  }
  if (!budget_waiters_.empty() && buffered_ <= wake_level_) {
    wake_budget_waiters();
  }
}

void Server::account(Conn& c) {
  const std::size_t now = c.in.footprint() + c.out.pending() + c.parked_bytes;
  if (now < c.accounted) {
    freed_since_trim_ += c.accounted - now;
  }
  buffered_ = buffered_ - c.accounted + now;
  c.accounted = now;
  if (!budget_waiters_.empty() && buffered_ <= wake_level_) {
    wake_budget_waiters();
  }
  if (freed_since_trim_ >= kTrimAfterFreed && c.out.empty()) {
    freed_since_trim_ = 0;
    ::malloc_trim(0);
  }
}

void Server::wake_budget_waiters() {
  if (waiters_wake_posted_) {
    return;
  }
  waiters_wake_posted_ = true;
  loop_.post([this] {
    waiters_wake_posted_ = false;
    wake_level_ = 0;  // waiters that block again raise it to what they need
    std::set<std::uint64_t> waiters;
    waiters.swap(budget_waiters_);
    for (std::uint64_t id : waiters) {
      auto it = conns_.find(id);
      if (it != conns_.end() && it->second->blocked && serve(*it->second)) {
        flush(*it->second);
      }
    }
  });
}

Server::Afford Server::afford(const Conn& c, std::size_t cost) const {
  const std::size_t unread = c.unread();
  if (unread + cost <= kConnectionReserve) {
    return Afford::yes;
  }
  // One reply larger than the per-connection cap is allowed when nothing else is unread (its
  // size is bounded by max_reply_bytes).
  if (c.out.pending() > 0 && unread + cost > options_.max_unread_reply_bytes) {
    return Afford::connection_full;
  }
  if (buffered_ + cost > options_.max_buffered_bytes) {
    return Afford::server_full;
  }
  return Afford::yes;
}

void Server::block(Conn& c, Afford why, std::size_t cost) {
  c.blocked = true;
  if (why == Afford::server_full) {
    budget_waiters_.insert(c.id);
    // Wake the waiters once the budget has room for this one (the cap is at least twice any
    // single reply, so the level is reachable).
    const std::size_t level =
        options_.max_buffered_bytes - std::min(cost, options_.max_buffered_bytes / 2);
    wake_level_ = std::max(wake_level_, level);
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
  if (c.blocked && !budget_waiters_.count(c.id) &&
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
    if (c.in.buffered() >= kConnectionReserve && buffered_ >= options_.max_buffered_bytes) {
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
  budget_waiters_.erase(id);  // blocks again below if the budget still says no
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
    std::size_t cost = reply_cost(q);
    if (cost > options_.max_reply_bytes) {
      cost = kSmallReply + 512;  // handle_request answers with a short too_large error
    }
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

Server::Simple Server::serve_simple(Conn& c, const SimpleRequest& s) {
  // Each case: refuse the rare paths, pay for the reply (as serve() does), then pop the frame
  // and answer. The views stay valid after pop(): the input buffer only moves when it is fed.
  constexpr std::size_t kHeader = net::kFrameHeaderBytes + 5;  // length, status, request id
  auto begin_reply = [&](std::size_t body) {
    if (c.out.empty()) {
      c.last_output = Clock::now();  // the stall clock starts with the first unsent reply
    }
    std::uint8_t* p = c.out.append(kHeader + body);
    net::put_u32(p, static_cast<std::uint32_t>(5 + body));
    p[4] = static_cast<std::uint8_t>(ReplyStatus::ok);
    net::put_u32(p + 5, s.id);
    return p + kHeader;
  };
  auto pay = [&](std::size_t cost) {
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      block(c, a, cost);
      return false;
    }
    return true;
  };
  switch (s.op) {
    case Op::set: {
      Bytes* held = table_.find_slot(s.key);  // the one lookup of an overwrite
      const std::size_t growth = held == nullptr
                                     ? s.key.size() + s.value.size() + KvTable::kEntryOverhead
                                     : s.value.size() - std::min(s.value.size(), held->size());
      if (growth > 0 && table_.stored_bytes() + growth > options_.max_stored_bytes) {
        return Simple::general;  // the "store is full" error
      }
      if (!pay(kSmallReply)) {
        return Simple::blocked;
      }
      c.in.pop();
      c.did_request = true;
      if (held != nullptr) {
        table_.overwrite(*held, s.value);  // an existing key: no watch can fire
      } else {
        table_.set_view(s.key, s.value);
      }
      begin_reply(0);
      break;
    }
    case Op::get: {
      const Bytes* v = table_.find(s.key);
      if (v == nullptr || v->size() + 4 > net::OutputQueue::kCoalesceBytes) {
        return Simple::general;  // parked or a timeout reply; large values as before
      }
      if (!pay(kSmallReply + 4 + v->size())) {
        return Simple::blocked;
      }
      c.in.pop();
      c.did_request = true;
      std::uint8_t* p = begin_reply(4 + v->size());
      net::put_u32(p, static_cast<std::uint32_t>(v->size()));
      if (!v->empty()) {
        std::memcpy(p + 4, v->data(), v->size());
      }
      return Simple::served;  // nothing changed: no watch to wake
    }
    default: {  // add
      // The longest int64 has 20 digits; the lookup is needed only near the limit.
      constexpr std::size_t kDigits = 20;
      if (table_.stored_bytes() + s.key.size() + kDigits + KvTable::kEntryOverhead >
          options_.max_stored_bytes) {
        const std::size_t growth = table_.growth_if_set(s.key, kDigits);
        if (growth > 0 && table_.stored_bytes() + growth > options_.max_stored_bytes) {
          return Simple::general;
        }
      }
      if (!pay(kSmallReply + 256 + s.key.size())) {
        return Simple::blocked;
      }
      const KvTable::AddResult r = table_.add(s.key, s.delta);
      if (r.status != KvTable::AddResult::Status::ok) {
        return Simple::general;  // unchanged; handle_request words the error
      }
      c.in.pop();
      c.did_request = true;
      put_le(begin_reply(8), static_cast<std::uint64_t>(r.value), 8);
      break;
    }
  }
  if (table_.has_ready()) {
    deliver_ready();
  }
  return Simple::served;
}

std::size_t Server::reply_cost(const Request& q) const {
  std::size_t n = kSmallReply;
  switch (q.op) {
    case Op::get:
    case Op::multi_get:
    case Op::wait:
    case Op::check:
      // Present keys cost their value; missing ones their name (timeout reply, or parked).
      for (const auto& k : q.keys) {
        const Bytes* v = table_.find(k);
        n += 4 + ((v != nullptr && q.op != Op::wait && q.op != Op::check) ? v->size() : k.size());
      }
      return n;
    case Op::list_keys:
      return n + table_.key_bytes() + 4 * table_.size();
    case Op::compare_set: {
      const Bytes* v = table_.find(q.keys[0]);
      return n + std::max(v != nullptr ? v->size() : 0, q.values[1].size());
    }
    case Op::add:
      return n + 256 + q.keys[0].size();
    default:
      return n;
  }
}

std::size_t Server::parked_cost(const Parked& p) const {
  std::size_t n = kSmallReply;
  if (p.op != Op::wait) {
    for (const auto& k : p.keys) {
      const Bytes* v = table_.find(k);
      n += 4 + (v != nullptr ? v->size() : 0);
    }
  }
  return n;
}

bool Server::handle_hello(Conn& c) {
  if (c.awaiting_auth) {
    return handle_auth(c);
  }
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
  c.member = (hello->flags & kHelloFlagMember) != 0;
  if (!options_.token.empty()) {
    // No key operation before the client proves it knows the token (handle_auth).
    encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::auth_required)},
                 answer);
    c.challenge = random_nonce();
    std::vector<std::uint8_t> out(answer, answer + kHelloBytes);
    out.insert(out.end(), c.challenge.begin(), c.challenge.end());
    c.out.push(std::move(out));
    c.awaiting_auth = true;
    return true;
  }
  encode_hello({kProtocolVersion, static_cast<std::uint16_t>(HelloStatus::accepted)}, answer);
  c.out.push(std::vector<std::uint8_t>(answer, answer + kHelloBytes));
  handshake_done(c);
  return true;
}

bool Server::handle_auth(Conn& c) {
  if (c.in.buffered() < kAuthAnswerBytes) {
    return true;
  }
  std::uint8_t answer[kAuthAnswerBytes];
  (void)c.in.take_raw(answer, kAuthAnswerBytes);
  Nonce theirs{};
  net::Mac proof{};
  std::copy(answer, answer + kNonceBytes, theirs.begin());
  std::copy(answer + kNonceBytes, answer + kAuthAnswerBytes, proof.begin());
  if (!net::equal_macs(proof, client_proof(options_.token, c.challenge, theirs))) {
    const std::uint8_t refused = 1;
    (void)c.socket.write(&refused, 1);  // best effort: tell the client why
    close_conn(c.id, "W",
               "authentication failed: the client's proof does not match this server's job "
               "token (a different CHORUS_STORE_TOKEN, or not a member of this job)");
    return false;
  }
  const net::Mac ours = server_proof(options_.token, c.challenge, theirs);
  std::vector<std::uint8_t> verdict{0};
  verdict.insert(verdict.end(), ours.begin(), ours.end());
  c.out.push(std::move(verdict));
  c.awaiting_auth = false;
  handshake_done(c);
  return true;
}

void Server::handshake_done(Conn& c) {
  c.hello_done = true;
  if (c.member) {
    ++members_joined_;
    check_client_waits();
  }
}

void Server::reply(Conn& c, Op op, const Reply& r) {
  if (c.out.empty()) {
    c.last_output = Clock::now();  // the stall clock starts with the first unsent reply
  }
  // Encoded into a reused buffer and copied into the output queue, where the replies of one
  // turn share a chunk (large ones keep their own buffer).
  thread_local std::vector<std::uint8_t> scratch;
  scratch.clear();
  encode_reply(op, r, scratch);
  if (scratch.size() <= net::OutputQueue::kCoalesceBytes) {
    c.out.append(std::span<const std::uint8_t>(scratch));
  } else {
    c.out.push(std::move(scratch));
    scratch = {};
  }
}

void Server::deliver(Conn& c, const Parked& p) {
  Reply r;
  r.id = p.request_id;
  if (p.op != Op::wait) {
    std::size_t bytes = 0;
    for (const auto& k : p.keys) {
      const Bytes* v = table_.find(k);
      bytes += 4 + (v != nullptr ? v->size() : 0);
    }
    if (bytes > options_.max_reply_bytes) {
      r.status = ReplyStatus::error;
      r.error = ErrorKind::too_large;
      r.message = fmt::format(
          "{} would return {} bytes, over this server's limit of {} per reply "
          "(max_reply_bytes); ask for fewer keys per call",
          to_string(p.op), bytes, options_.max_reply_bytes);
      reply(c, p.op, r);
      return;
    }
    for (const auto& k : p.keys) {
      const Bytes* v = table_.find(k);
      r.values.push_back(v != nullptr ? *v : Bytes{});
    }
  }
  reply(c, p.op, r);
}

void Server::park(Conn& c, const Request& q, Op op) {
  const KvTable::WatchId w = table_.add_watch(q.keys);
  if (w == 0) {
    // Cannot happen (callers check first), but answering is always safe.
    Parked now;
    now.request_id = q.id;
    now.op = op;
    now.keys = q.keys;
    deliver(c, now);
    return;
  }
  auto p = std::make_unique<Parked>();
  p->conn = c.id;
  p->request_id = q.id;
  p->op = op;
  p->keys = q.keys;
  p->bytes = 128;
  for (const auto& k : q.keys) {
    p->bytes += k.size() + 64;
  }
  c.parked_bytes += p->bytes;
  p->timer =
      loop_.add_timer(Deadline::after(clamp_ms(q.timeout_ms)), [this, w] { on_watch_timeout(w); });
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
  c.parked_bytes -= parked->bytes;
  Reply r;
  r.status = ReplyStatus::timeout;
  r.id = parked->request_id;
  r.keys = table_.missing(parked->keys);
  reply(c, parked->op, r);  // small: the names of missing keys, already counted while parked
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
    if (!c.deferred.empty()) {
      c.deferred.push_back(std::move(parked));  // behind earlier deferred replies; c is blocked
      continue;
    }
    const std::size_t cost = parked_cost(*parked);
    const Afford a = afford(c, cost);
    if (a != Afford::yes) {
      // The value is set but the reply is not affordable now: it goes out when budget frees.
      c.deferred.push_back(std::move(parked));
      block(c, a, cost);
      update_interest(c);
      continue;
    }
    c.parked_bytes -= parked->bytes;
    deliver(c, *parked);
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

namespace {
Reply error_reply(std::uint32_t id, ErrorKind kind, std::string message) {
  Reply r;
  r.id = id;
  r.status = ReplyStatus::error;
  r.error = kind;
  r.message = std::move(message);
  return r;
}
}  // namespace

std::optional<Reply> Server::refuse_if_full(const Request& q) const {
  std::size_t growth = 0;
  switch (q.op) {
    case Op::set:
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size() && i < q.values.size(); ++i) {
        growth += table_.growth_if_set(q.keys[i], q.values[i].size());
      }
      break;
    case Op::compare_set:
      growth = table_.growth_if_set(q.keys[0], q.values[1].size());
      break;
    case Op::append: {
      const Bytes* held = table_.find(q.keys[0]);
      growth = table_.growth_if_set(q.keys[0],
                                    (held != nullptr ? held->size() : 0) + q.values[0].size());
      break;
    }
    case Op::add:
      growth = table_.growth_if_set(q.keys[0], 20);  // the longest int64 in decimal
      break;
    default:
      return std::nullopt;
  }
  if (growth == 0 || table_.stored_bytes() + growth <= options_.max_stored_bytes) {
    return std::nullopt;
  }
  return error_reply(
      q.id, ErrorKind::too_large,
      fmt::format("the store is full: it holds {} bytes of keys and values and this {} would add "
                  "{}, over this server's limit of {} (max_stored_bytes, chorus-store "
                  "--max-stored-bytes); nothing was stored. Delete keys that are no longer needed "
                  "(an earlier job's), or raise the limit",
                  table_.stored_bytes(), to_string(q.op), growth, options_.max_stored_bytes));
}

void Server::handle_request(Conn& c, Request& q) {
  if (auto refused = refuse_if_full(q)) {
    reply(c, q.op, *refused);
    return;
  }
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
      if (q.op != Op::wait) {
        const std::size_t cost = reply_cost(q);
        if (cost > options_.max_reply_bytes) {
          r = error_reply(
              q.id, ErrorKind::too_large,
              fmt::format("{} of {} keys would return about {} bytes, over this "
                          "server's limit of {} per reply (max_reply_bytes); ask for "
                          "fewer keys per call",
                          to_string(q.op), q.keys.size(), cost, options_.max_reply_bytes));
          break;
        }
      }
      const auto missing = table_.missing(q.keys);
      if (!missing.empty()) {
        if (q.timeout_ms == 0) {
          r.status = ReplyStatus::timeout;
          r.keys = missing;
          break;
        }
        if (c.watches.size() >= kMaxParkedPerConnection) {
          r = error_reply(q.id, ErrorKind::too_large,
                          fmt::format("{} waiting requests on one connection, the limit; a "
                                      "client thread waits for one at a time",
                                      c.watches.size()));
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
      const auto v = table_.add(q.keys[0], q.delta);
      if (v.status == KvTable::AddResult::Status::not_integer) {
        const Bytes* held = table_.find(q.keys[0]);
        r = error_reply(
            q.id, ErrorKind::not_integer,
            fmt::format("add('{}'): the key holds '{}', not an integer counter; use a key only as "
                        "a counter or only with set()",
                        q.keys[0],
                        printable_prefix(held->data(), std::min<std::size_t>(held->size(), 32))));
      } else if (v.status == KvTable::AddResult::Status::overflow) {
        r = error_reply(q.id, ErrorKind::bad_request,
                        counter_overflow_message(q.keys[0], v.value, q.delta));
      } else {
        r.integer = v.value;
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
    case Op::append: {
      const Bytes* held = table_.find(q.keys[0]);
      const std::size_t total = (held != nullptr ? held->size() : 0) + q.values[0].size();
      if (total > limits_.max_value_bytes) {
        r = error_reply(q.id, ErrorKind::too_large,
                        fmt::format("append('{}'): the value would grow to {} bytes, over the "
                                    "limit of {} (max_value_bytes); nothing was appended",
                                    q.keys[0], total, limits_.max_value_bytes));
        break;
      }
      table_.append(q.keys[0], q.values[0]);
      mutated = true;
      break;
    }
    case Op::list_keys: {
      const std::size_t cost = reply_cost(q);
      if (cost > options_.max_reply_bytes) {
        r = error_reply(q.id, ErrorKind::too_large,
                        fmt::format("list_keys would return about {} bytes for {} keys, over this "
                                    "server's limit of {} per reply (max_reply_bytes)",
                                    cost, table_.size(), options_.max_reply_bytes));
        break;
      }
      // Encoded once per key set: many list_keys calls on a large table cost a copy each,
      // not a sort and an encode each.
      if (!list_keys_cache_valid_ || list_keys_generation_ != table_.key_generation()) {
        list_keys_cache_.clear();
        encode_strings(table_.keys(), list_keys_cache_);
        list_keys_generation_ = table_.key_generation();
        list_keys_cache_valid_ = true;
      }
      r.encoded_body = &list_keys_cache_;
      break;
    }
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
        const auto timer =
            loop_.add_timer(Deadline::after(clamp_ms(q.timeout_ms)), [this, wid, conn, rid, count] {
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
