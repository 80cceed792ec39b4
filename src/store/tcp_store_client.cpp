// SPDX-License-Identifier: BSD-3-Clause
// TcpStore client connection: handshake, multiplexed framed request/response with deadlines.
#include "store/tcp_store_client.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "net/address.hpp"
#include "net/connect.hpp"
#include "store/store_auth.hpp"

namespace chorus::store {
namespace {
// Waiting ops are timed out by the server at their deadline; the client waits this much longer
// for that answer before it declares the server unresponsive.
constexpr Duration kReplyGrace = std::chrono::seconds(5);

int io_errno(const net::IoResult& r) {
  return r.error() ? r.os_error : (r.timed_out() ? ETIMEDOUT : ECONNRESET);
}

// The challenge-response after a hello answered with auth_required (docs/protocol.md §1.1).
// Returns 0, or an errno to retry the connect with; throws StoreError when the token is wrong or
// missing (retrying cannot help).
int authenticate(net::Socket& s, Deadline deadline, const std::string& token) {
  const std::string server = s.peer_address().to_string();
  Nonce challenge{};
  net::IoResult r = net::recv_exact(s, challenge.data(), challenge.size(), deadline);
  if (!r.ok()) {
    return io_errno(r);
  }
  if (token.empty()) {
    throw StoreError(
        fmt::format("the store server at {} requires a job token and this process has none: set "
                    "CHORUS_STORE_TOKEN to the job's token (chorusrun sets it for its ranks)",
                    server));
  }
  const Nonce mine = random_nonce();
  const net::Mac proof = client_proof(token, challenge, mine);
  std::uint8_t answer[kAuthAnswerBytes];
  std::copy(mine.begin(), mine.end(), answer);
  std::copy(proof.begin(), proof.end(), answer + kNonceBytes);
  if (net::IoResult w = net::send_all(s, answer, sizeof answer, deadline); !w.ok()) {
    return io_errno(w);
  }
  std::uint8_t verdict[kAuthVerdictBytes];
  r = net::recv_exact(s, verdict, 1, deadline);
  if (r.closed() || (r.ok() && verdict[0] != 0)) {
    throw StoreError(fmt::format(
        "the store server at {} refused this process's job token (authentication failed): "
        "CHORUS_STORE_TOKEN differs from the server's; every process of a job needs the same one",
        server));
  }
  if (!r.ok()) {
    return io_errno(r);
  }
  r = net::recv_exact(s, verdict + 1, net::kMacBytes, deadline);
  if (!r.ok()) {
    return io_errno(r);
  }
  net::Mac theirs{};
  std::copy(verdict + 1, verdict + kAuthVerdictBytes, theirs.begin());
  if (!net::equal_macs(theirs, server_proof(token, challenge, mine))) {
    throw StoreError(fmt::format(
        "the store server at {} accepted this process but could not prove it knows the job "
        "token: it is not the job's store (an impostor, or a misrouted address)",
        server));
  }
  return 0;
}

int do_hello(net::Socket& s, Deadline deadline, bool member, const std::string& token) {
  std::uint8_t hello[kHelloBytes];
  std::uint16_t flags = member ? kHelloFlagMember : std::uint16_t{0};
  if (!token.empty()) {
    flags |= kHelloFlagToken;
  }
  encode_hello({kProtocolVersion, flags}, hello);
  net::IoResult w = net::send_all(s, hello, kHelloBytes, deadline);
  if (!w.ok()) {
    return io_errno(w);
  }
  std::uint8_t answer[kHelloBytes];
  net::IoResult r = net::recv_exact(s, answer, kHelloBytes, deadline);
  if (!r.ok()) {
    // A reset or EOF here is what a flooded listen backlog looks like: retry.
    return io_errno(r);
  }
  const auto h = decode_hello(answer);
  if (!h) {
    throw StoreError(fmt::format(
        "the server at {} is not a chorus store (its handshake starts with other bytes); check "
        "the address and port",
        s.peer_address().to_string()));
  }
  if (h->flags == static_cast<std::uint16_t>(HelloStatus::auth_required)) {
    return authenticate(s, deadline, token);
  }
  if (h->flags != static_cast<std::uint16_t>(HelloStatus::accepted)) {
    throw StoreError(fmt::format(
        "the store server at {} speaks protocol version {} and refused our version {}; use the "
        "same chorus version on clients and server",
        s.peer_address().to_string(), h->version, kProtocolVersion));
  }
  if (!token.empty()) {
    throw StoreError(fmt::format(
        "the store server at {} does not require a job token but this process has one "
        "(CHORUS_STORE_TOKEN): refusing to use a store that cannot prove it is the job's; start "
        "the server with the token (chorus-store --token-file), or unset it here",
        s.peer_address().to_string()));
  }
  return 0;
}

// True if the peer closed or reset the connection (EOF or an error is pending). Called with no
// request outstanding; bytes the server sent unasked are left for the reader to judge.
bool peer_closed(int fd) {
  std::uint8_t byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    return true;
  }
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace

Client::Client(std::string host, std::uint16_t port, Limits limits, Deadline connect_deadline,
               bool member, std::string token, Duration peer_timeout, net::SocketAddress local)
    : host_(std::move(host)),
      port_(port),
      limits_(limits),
      member_(member),
      peer_timeout_(peer_timeout),
      local_(local),
      token_(std::move(token)),
      reader_(limits.max_reply_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked(connect_deadline);
}

Client::~Client() = default;

std::string Client::address() const { return net::format_host_port(host_, port_); }

void Client::connect_locked(Deadline deadline) {
  net::ConnectOptions o;
  o.what = "the store server";
  o.local = local_;
  // Once connected, a refusal means the server process is gone (the job's store host exited):
  // say so at once rather than retry until the deadline. Before the first connection it may
  // simply not be up yet.
  o.refused_is_final = generation_ > 0;
  const bool member = member_;
  o.after_connect = [member, this](net::Socket& s, Deadline d) {
    return do_hello(s, d, member, token_);
  };
  net::Socket s = net::connect(host_, port_, deadline, o);
  s.set_dead_peer_timeout(peer_timeout_);
  socket_ = std::move(s);
  reader_ = net::FrameReader(limits_.max_reply_bytes);
  ++generation_;
  broken_ = false;
  broken_why_.clear();
  broken_errno_ = 0;
  broken_protocol_ = false;
  pending_.clear();
}

void Client::fail_connection_locked(const std::string& why, int os_error) {
  if (broken_) {
    return;
  }
  broken_ = true;
  broken_why_ = why;
  broken_errno_ = os_error;
  // shutdown, not close: another thread may be inside send() on this fd right now.
  socket_.shutdown_write();
  ::shutdown(socket_.fd(), SHUT_RDWR);
  cv_.notify_all();
}

bool Client::read_one_frame(std::unique_lock<std::mutex>& lock, Deadline deadline) {
  // Reader role: the socket and reader_ are used without mu_ held.
  lock.unlock();
  std::vector<std::uint8_t> frame;
  std::string failure;
  int failure_errno = 0;
  bool timed_out = false;
  bool protocol_violation = false;
  // A reply is rarely there the moment the request has left: wait for the socket before the
  // first read rather than make a read that only says "nothing yet".
  bool poll_before_read = true;
  for (;;) {
    std::span<const std::uint8_t> payload;
    const auto status = reader_.next(payload);
    if (status == net::FrameReader::Status::frame) {
      frame.assign(payload.begin(), payload.end());
      reader_.shrink_if_idle();
      break;
    }
    if (status == net::FrameReader::Status::too_large) {
      // Refused from the header alone: nothing of the announced size is allocated.
      failure = fmt::format(
          "the server announced a reply of {} bytes, over this client's limit of "
          "{} bytes (TcpStoreOptions::max_reply_bytes); it is not a chorus store "
          "server of this version, or it is misbehaving",
          reader_.announced(), limits_.max_reply_bytes);
      protocol_violation = true;
      break;
    }
    if (poll_before_read) {
      const int ready = net::poll_until(socket_.fd(), POLLIN, deadline);
      if (ready == 0) {
        timed_out = true;
        break;
      }
      if (ready < 0) {
        failure = net::errno_name(-ready);
        failure_errno = -ready;
        break;
      }
    }
    net::IoResult r = reader_.read_from(socket_);
    if (r.ok()) {
      poll_before_read = false;  // the rest of a frame is often there already
      continue;
    }
    if (r.would_block()) {
      poll_before_read = true;
      continue;
    }
    failure = r.describe();
    failure_errno = r.os_error;
    break;
  }
  lock.lock();
  if (timed_out) {
    return false;
  }
  if (!failure.empty()) {
    fail_connection_locked(failure, failure_errno);
    broken_protocol_ = broken_protocol_ || protocol_violation;
    return true;
  }
  if (frame.size() < 5) {
    fail_connection_locked("malformed reply (shorter than its header)", 0);
    broken_protocol_ = true;
    return true;
  }
  const std::uint32_t id = net::get_u32(frame.data() + 1);
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    fail_connection_locked(fmt::format("reply for unknown request id {}", id), 0);
    broken_protocol_ = true;
    return true;
  }
  Reply reply;
  DecodeError err;
  if (!decode_reply(it->second.op, frame, reply, err)) {
    fail_connection_locked(fmt::format("malformed reply: {}", err.message), 0);
    broken_protocol_ = true;
    return true;
  }
  if (it->second.abandoned) {
    pending_.erase(it);
  } else {
    it->second.reply = std::move(reply);
    it->second.done = true;
  }
  cv_.notify_all();
  return true;
}

Reply Client::call(Request& q, Deadline deadline) {
  const auto start = Clock::now();
  const bool waits = q.op == Op::get || q.op == Op::wait || q.op == Op::multi_get ||
                     q.op == Op::get_with || q.op == Op::wait_clients;
  const Deadline reply_deadline =
      waits && !deadline.is_never() ? Deadline::at(deadline.when() + kReplyGrace) : deadline;
  auto context = [&] {
    ErrorContext ctx;
    ctx.op = fmt::format("store.{}", to_string(q.op));
    ctx.peer_address = address();
    ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
    return ctx;
  };

  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_ && socket_.valid() && !reading_ && pending_.empty() && peer_closed(socket_.fd())) {
    // The server closed this idle connection (restart, or eviction of idle connections at its
    // connection limit): reconnect instead of failing this call.
    broken_ = true;
    broken_why_ = "the server closed the idle connection";
  }
  if (broken_ || !socket_.valid()) {
    // Reconnect once nobody is still using the old socket.
    cv_.wait_until(lock, reply_deadline.when(), [&] { return !reading_; });
    if (reading_) {
      throw TimeoutError(fmt::format("store {} to {}: could not reconnect within the deadline",
                                     to_string(q.op), address()),
                         context());
    }
    if (broken_ || !socket_.valid()) {
      connect_locked(deadline);
    }
  }
  const std::uint64_t generation = generation_;
  q.id = next_id_++;
  if (next_id_ == 0) {
    next_id_ = 1;
  }
  Pending& mine = pending_[q.id];
  mine.op = q.op;
  const std::uint32_t id = q.id;
  const int fd = socket_.fd();
  lock.unlock();

  std::vector<std::uint8_t> out;
  encode_request(q, out);
  net::IoResult w;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    net::Socket borrowed(fd);  // the fd stays owned by socket_
    w = net::send_all(borrowed, out.data(), out.size(), reply_deadline);
    (void)borrowed.release();
  }
  lock.lock();
  if (!w.ok() && generation_ == generation) {
    if (w.timed_out() && w.bytes == 0) {
      pending_.erase(id);
      throw TimeoutError(
          fmt::format("store {} to {}: could not send the request within {}; the server is not "
                      "reading (overloaded or stopped): check it, or raise the timeout",
                      to_string(q.op), address(), format_duration(context().elapsed)),
          context());
    }
    // A partially sent frame leaves the stream unusable.
    fail_connection_locked(fmt::format("sending the request failed: {}", w.describe()), w.os_error);
  }

  for (;;) {
    if (generation_ != generation || broken_) {
      pending_.erase(id);
      ErrorContext ctx = context();
      ctx.os_error = broken_errno_;
      if (broken_protocol_) {
        throw StoreError(fmt::format("store {} to {}: {}; the connection was closed",
                                     to_string(q.op), address(), broken_why_),
                         ctx);
      }
      if (broken_errno_ == ETIMEDOUT && peer_timeout_ > Duration::zero()) {
        throw NetworkError(
            fmt::format("store {} to {}: no answer from the store's host for about {} (peer "
                        "timeout, CHORUS_PEER_TIMEOUT): the host is down or the network to it is "
                        "partitioned ({}); the next call reconnects",
                        to_string(q.op), address(), format_duration(peer_timeout_), broken_why_),
            ctx);
      }
      throw NetworkError(
          fmt::format(
              "store {} to {}: connection lost: {}; the store server stopped or closed "
              "this connection (see its log); the next call reconnects",
              to_string(q.op), address(),
              broken_why_.empty() ? std::string("reconnected by another thread") : broken_why_),
          ctx);
    }
    auto it = pending_.find(id);
    if (it != pending_.end() && it->second.done) {
      Reply reply = std::move(it->second.reply);
      pending_.erase(it);
      return reply;
    }
    if (reply_deadline.expired()) {
      if (it != pending_.end()) {
        it->second.abandoned = true;
      }
      throw TimeoutError(
          fmt::format("store {} to {}: no reply within {}; the server is overloaded, stopped "
                      "(SIGSTOP) or unreachable: check it, or raise the timeout",
                      to_string(q.op), address(), format_duration(context().elapsed)),
          context());
    }
    if (!reading_) {
      reading_ = true;
      const bool got = read_one_frame(lock, reply_deadline);
      reading_ = false;
      cv_.notify_all();  // hand the reader role to another waiter if our reply came
      (void)got;
    } else {
      cv_.wait_until(lock, reply_deadline.when());
    }
  }
}

}  // namespace chorus::store
