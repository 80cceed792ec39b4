// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport: gathered writes and scattered reads over the posted messages of each
// socket (one syscall moves many small messages, e.g. a signature header and its payload),
// interest in EPOLLIN/EPOLLOUT only while there is something to receive/send, and failure
// detection that names the peer.
#include "tcp/socket_transport.hpp"

#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/logging.hpp"

namespace chorus::tcp {
namespace {
constexpr int kMaxIov = 32;
// Bytes one readiness callback may move before returning to the loop, so that one busy
// socket cannot starve the others (level-triggered epoll reports it again).
constexpr std::size_t kIoBudget = 8u << 20;

std::string size_mismatch(int peer, std::size_t sent, std::uint32_t tag, std::size_t expected) {
  return fmt::format("rank {} sent {} bytes with tag {} but this recv expects {} bytes", peer, sent, tag,
                     expected);
}

// One iovec per queued part (up to kMaxIov), the first starting `off` bytes in.
template <class Queue>
int fill_iov(const Queue& q, std::size_t off, iovec* iov) {
  int cnt = 0;
  for (auto it = q.begin(); it != q.end() && cnt < kMaxIov; ++it, ++cnt) {
    const std::size_t skip = cnt == 0 ? off : 0;
    iov[cnt] = {it->data + skip, it->len - skip};
  }
  return cnt;
}
}  // namespace

SocketTransport::SocketTransport(int rank, int size, Mesh mesh, net::EventLoop& loop)
    : rank_(rank),
      size_(size),
      loop_(loop),
      local_address_(mesh.local_address),
      peers_(static_cast<std::size_t>(size)),
      discard_(64 * 1024) {
  for (int p = 0; p < size; ++p) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(p)];
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    peer.address = link.address;
    if (p == rank_) {
      continue;
    }
    peer.control = std::make_unique<Control>();
    peer.control->sock = std::move(link.control);
    peer.control->interest = EPOLLIN;
    loop_.add(peer.control->sock.fd(), EPOLLIN, [this, p](std::uint32_t ev) { on_control(p, ev); });
    peer.control->registered = true;
    for (auto& sock : link.data) {
      auto s = std::make_unique<Stream>();
      s->sock = std::move(sock);
      s->peer = p;
      Stream* raw = s.get();
      loop_.add(raw->sock.fd(), 0, [this, raw](std::uint32_t ev) { on_stream(*raw, ev); });
      raw->registered = true;
      peer.data.push_back(std::move(s));
    }
  }
}

SocketTransport::~SocketTransport() { close_all(); }

std::uint32_t SocketTransport::new_req(std::uint64_t token, std::uint32_t parts) {
  std::uint32_t id;
  if (!free_reqs_.empty()) {
    id = free_reqs_.back();
    free_reqs_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(reqs_.size());
    reqs_.emplace_back();
  }
  reqs_[id] = {token, parts};
  return id;
}

void SocketTransport::part_done(std::uint32_t req) {
  Req& r = reqs_[req];
  if (--r.parts == 0) {
    completed_.push_back(r.token);
    free_reqs_.push_back(req);
  }
}

bool SocketTransport::peer_connected(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  return p.control && !p.control->dead && !p.failed;
}

// ---- collective streams ------------------------------------------------------------------

void SocketTransport::post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) {
  post(peer, static_cast<std::byte*>(const_cast<void*>(data)), bytes, token, true);
}

void SocketTransport::post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) {
  post(peer, static_cast<std::byte*>(data), bytes, token, false);
}

void SocketTransport::post(int peer, std::byte* base, std::size_t bytes, std::uint64_t token, bool send) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  const std::size_t k = p.data.size();
  const std::uint64_t index = send ? p.sends++ : p.recvs++;
  if (p.failed) {
    return;  // the engine already heard about it and fails the op
  }
  auto queue = [send](Stream& s) -> std::deque<Part>& { return send ? s.sendq : s.recvq; };
  auto pump = [this, send](Stream& s) { send ? write_stream(s) : read_stream(s); };
  if (k > 1 && bytes >= k * kStripeBytes) {
    const std::size_t per = (bytes + k - 1) / k;
    const std::uint32_t req = new_req(token, static_cast<std::uint32_t>(k));
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t off = i * per;
      Stream& s = *p.data[i];
      const bool idle = queue(s).empty();
      queue(s).push_back({base + off, std::min(per, bytes - off), req});
      if (idle && !s.dead) {
        pump(s);
      }
    }
    return;
  }
  Stream& s = *p.data[index % k];
  const bool idle = queue(s).empty();
  queue(s).push_back({base, bytes, new_req(token, 1)});
  if (s.dead) {
    stream_failed(s, "connection already closed", 0);
  } else if (idle) {
    pump(s);
  }
}

void SocketTransport::update_interest(Stream& s) {
  if (s.dead) {
    return;
  }
  const std::uint32_t want = (s.recvq.empty() ? 0u : static_cast<std::uint32_t>(EPOLLIN)) |
                             (s.sendq.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (want != s.interest) {
    loop_.modify(s.sock.fd(), want);
    s.interest = want;
  }
}

// Marks the parts that `bytes` just moved (from the front of q, `off` bytes into the first)
// done, and leaves `off` at the progress into the new front part.
void SocketTransport::consume(std::deque<Part>& q, std::size_t& off, std::size_t bytes) {
  while (bytes > 0) {
    Part& part = q.front();
    const std::size_t rest = part.len - off;
    if (bytes < rest) {
      off += bytes;
      return;
    }
    bytes -= rest;
    off = 0;
    const std::uint32_t req = part.req;
    q.pop_front();
    part_done(req);
  }
}

bool SocketTransport::write_stream(Stream& s) { return move_stream(s, true); }

bool SocketTransport::read_stream(Stream& s) { return move_stream(s, false); }

// Moves the socket's posted messages (sends or receives) until it would block or kIoBudget
// bytes moved. False if the stream failed.
bool SocketTransport::move_stream(Stream& s, bool send) {
  std::deque<Part>& q = send ? s.sendq : s.recvq;
  std::size_t& off = send ? s.send_off : s.recv_off;
  std::size_t moved = 0;
  while (!q.empty() && moved < kIoBudget) {
    iovec iov[kMaxIov];
    const int cnt = fill_iov(q, off, iov);
    const net::IoResult r = send ? s.sock.writev(iov, cnt) : s.sock.readv(iov, cnt);
    if (r.would_block()) {
      break;
    }
    if (!send && (r.closed() || (r.ok() && r.bytes == 0))) {
      s.eof = true;
      // A goodbye may be waiting on the control socket: read it first, so the message says
      // "left the group" rather than "died" when that is what happened.
      if (!peers_[static_cast<std::size_t>(s.peer)].goodbye) {
        read_control(s.peer);
      }
      stream_failed(s, "the connection was closed while this rank still expected data", 0);
      return false;
    }
    if (!r.ok()) {
      stream_failed(s, (send ? "send failed: " : "receive failed: ") + r.describe(), r.os_error);
      return false;
    }
    moved += r.bytes;
    consume(q, off, r.bytes);
  }
  update_interest(s);
  return true;
}

void SocketTransport::on_stream(Stream& s, std::uint32_t events) {
  if (s.dead) {
    return;
  }
  if ((events & EPOLLIN) && !read_stream(s)) {
    return;
  }
  if ((events & EPOLLOUT) && !write_stream(s)) {
    return;
  }
  if (events & (EPOLLERR | EPOLLHUP)) {
    const int err = s.sock.take_error();
    stream_failed(s, err ? "connection error: " + net::errno_name(err) : "connection hung up", err);
  }
}

void SocketTransport::stream_failed(Stream& s, const std::string& what, int os_error) {
  const bool pending = !s.sendq.empty() || !s.recvq.empty();
  if (!s.dead) {
    s.dead = true;
    if (s.registered) {
      loop_.remove(s.sock.fd());
      s.registered = false;
    }
    s.sock.close();
  }
  const Peer& p = peers_[static_cast<std::size_t>(s.peer)];
  // A data socket closing after its peer said goodbye is the normal end, unless this rank
  // still had something to exchange on it.
  if (pending || !p.goodbye) {
    peer_failed(s.peer, what, os_error);
  }
}

// ---- control channel ---------------------------------------------------------------------

void SocketTransport::p2p_done(int peer, std::uint64_t token, std::string error) {
  TransportEvent ev;
  ev.kind = TransportEvent::Kind::p2p_done;
  ev.peer = peer;
  ev.token = token;
  ev.error = std::move(error);
  events_.push_back(std::move(ev));
}

void SocketTransport::send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                               std::uint64_t token) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!peer_connected(peer)) {
    p2p_done(peer, token, p.goodbye ? "the peer left the group" : "the connection to the peer is gone");
    return;
  }
  OutFrame f;
  f.header = encode_header({FrameType::p2p, tag, bytes});
  f.data = static_cast<const std::byte*>(data);
  f.len = bytes;
  f.token = token;
  const bool idle = p.control->sendq.empty();
  p.control->sendq.push_back(std::move(f));
  if (idle) {
    write_control(peer);
  }
}

void SocketTransport::recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                               std::uint64_t token) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Control& c = *p.control;
  for (auto it = c.unexpected.begin(); it != c.unexpected.end(); ++it) {
    if (it->tag != tag) {
      continue;
    }
    std::string error;
    if (it->bytes.size() != bytes) {
      error = size_mismatch(peer, it->bytes.size(), tag, bytes);
    } else if (bytes > 0) {
      std::memcpy(data, it->bytes.data(), bytes);
    }
    c.unexpected.erase(it);
    p2p_done(peer, token, std::move(error));
    return;
  }
  if (!peer_connected(peer)) {
    p2p_done(peer, token, p.goodbye ? "the peer left the group" : "the connection to the peer is gone");
    return;
  }
  c.posted.push_back({tag, static_cast<std::byte*>(data), bytes, token});
}

void SocketTransport::send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) {
  if (!peer_connected(peer)) {
    return;
  }
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  OutFrame f;
  f.header = encode_header({type, 0, payload.size()});
  f.owned = std::move(payload);
  f.data = reinterpret_cast<const std::byte*>(f.owned.data());
  f.len = f.owned.size();
  const bool idle = c.sendq.empty();
  c.sendq.push_back(std::move(f));
  if (idle) {
    write_control(peer);
  }
}

void SocketTransport::update_control_interest(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  if (c.dead) {
    return;
  }
  const std::uint32_t want = EPOLLIN | (c.sendq.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (want != c.interest) {
    loop_.modify(c.sock.fd(), want);
    c.interest = want;
  }
}

void SocketTransport::write_control(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  while (!c.sendq.empty() && !c.dead) {
    iovec iov[kMaxIov];
    int cnt = 0;
    bool first = true;
    for (auto it = c.sendq.begin(); it != c.sendq.end() && cnt + 2 <= kMaxIov; ++it) {
      const std::size_t off = first ? it->off : 0;
      first = false;
      if (off < kFrameHeaderBytes) {
        iov[cnt++] = {it->header.data() + off, kFrameHeaderBytes - off};
        if (it->len > 0) {
          iov[cnt++] = {const_cast<std::byte*>(it->data), it->len};
        }
      } else {
        iov[cnt++] = {const_cast<std::byte*>(it->data) + (off - kFrameHeaderBytes),
                      it->len - (off - kFrameHeaderBytes)};
      }
    }
    const net::IoResult r = c.sock.writev(iov, cnt);
    if (r.would_block()) {
      break;
    }
    if (!r.ok()) {
      peer_failed(peer, "send failed: " + r.describe(), r.os_error);
      return;
    }
    std::size_t left = r.bytes;
    while (left > 0) {
      OutFrame& f = c.sendq.front();
      const std::size_t rest = kFrameHeaderBytes + f.len - f.off;
      if (left >= rest) {
        left -= rest;
        if (f.token != 0) {
          p2p_done(peer, f.token);
        }
        c.sendq.pop_front();
      } else {
        f.off += left;
        left = 0;
      }
    }
  }
  update_control_interest(peer);
}

void SocketTransport::read_control(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  std::size_t moved = 0;
  while (!c.dead && moved < kIoBudget) {
    if (!c.in_body) {
      const net::IoResult r = c.sock.read(c.header.data() + c.header_got, kFrameHeaderBytes - c.header_got);
      if (r.would_block()) {
        return;
      }
      if (r.closed() || (r.ok() && r.bytes == 0)) {
        Peer& p = peers_[static_cast<std::size_t>(peer)];
        if (p.goodbye && c.header_got == 0) {
          // The peer left the group in order; its data sockets close next.
          c.dead = true;
          loop_.remove(c.sock.fd());
          c.registered = false;
          c.sock.close();
          return;
        }
        peer_failed(peer, "the connection was closed without the peer leaving the group: the process "
                          "died, was killed, or exited without destroying its group",
                    0);
        return;
      }
      if (!r.ok()) {
        peer_failed(peer, "receive failed: " + r.describe(), r.os_error);
        return;
      }
      c.header_got += r.bytes;
      if (c.header_got < kFrameHeaderBytes) {
        continue;
      }
      c.header_got = 0;
      c.frame = decode_header(c.header.data());
      c.in_body = true;
      c.body_got = 0;
      c.body_token = 0;
      c.body_error.clear();
      c.body_dst = nullptr;
      if (c.frame.type == FrameType::p2p) {
        auto it = std::find_if(c.posted.begin(), c.posted.end(),
                               [&](const P2pRecv& p) { return p.tag == c.frame.tag; });
        if (it == c.posted.end()) {
          c.body_buf.assign(c.frame.length, 0);
          c.body_dst = reinterpret_cast<std::byte*>(c.body_buf.data());
        } else if (it->bytes != c.frame.length) {
          c.body_error = size_mismatch(peer, c.frame.length, c.frame.tag, it->bytes);
          c.body_token = it->token;
          c.posted.erase(it);
        } else {
          c.body_dst = it->data;
          c.body_token = it->token;
          c.posted.erase(it);
        }
      } else if (c.frame.type >= FrameType::abort && c.frame.type <= FrameType::status_reply &&
                 c.frame.length <= kMaxControlPayload) {
        c.body_buf.assign(c.frame.length, 0);
        c.body_dst = reinterpret_cast<std::byte*>(c.body_buf.data());
      } else {
        peer_failed(peer, fmt::format("protocol error on the control connection (frame type {}, {} bytes)",
                                      static_cast<std::uint32_t>(c.frame.type), c.frame.length),
                    0);
        return;
      }
    }
    if (c.body_got < c.frame.length) {
      const std::size_t want = c.frame.length - c.body_got;
      std::byte* dst = c.body_dst ? c.body_dst + c.body_got : discard_.data();
      const std::size_t len = c.body_dst ? want : std::min(want, discard_.size());
      const net::IoResult r = c.sock.read(dst, len);
      if (r.would_block()) {
        return;
      }
      if (r.closed() || (r.ok() && r.bytes == 0)) {
        peer_failed(peer, "the connection was closed in the middle of a message", 0);
        return;
      }
      if (!r.ok()) {
        peer_failed(peer, "receive failed: " + r.describe(), r.os_error);
        return;
      }
      c.body_got += r.bytes;
      moved += r.bytes;
    }
    if (c.body_got == c.frame.length) {
      control_frame_complete(peer);
    }
  }
}

void SocketTransport::control_frame_complete(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Control& c = *p.control;
  c.in_body = false;
  if (c.frame.type == FrameType::p2p) {
    if (c.body_token != 0) {
      p2p_done(peer, c.body_token, std::move(c.body_error));
      return;
    }
    // Unexpected: a recv may have been posted while the body was arriving.
    auto it = std::find_if(c.posted.begin(), c.posted.end(),
                           [&](const P2pRecv& r) { return r.tag == c.frame.tag; });
    if (it == c.posted.end()) {
      c.unexpected.push_back({c.frame.tag, std::move(c.body_buf)});
      return;
    }
    std::string error;
    if (it->bytes != c.body_buf.size()) {
      error = size_mismatch(peer, c.body_buf.size(), c.frame.tag, it->bytes);
    } else if (it->bytes > 0) {
      std::memcpy(it->data, c.body_buf.data(), it->bytes);
    }
    const std::uint64_t token = it->token;
    c.posted.erase(it);
    p2p_done(peer, token, std::move(error));
    return;
  }
  TransportEvent ev;
  ev.peer = peer;
  if (c.frame.type == FrameType::goodbye) {
    p.goodbye = true;
  }
  ev.kind = TransportEvent::Kind::control;
  ev.frame = c.frame.type;
  ev.payload = std::move(c.body_buf);
  events_.push_back(std::move(ev));
}

void SocketTransport::on_control(int peer, std::uint32_t events) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  if (c.dead) {
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    read_control(peer);
  }
  if (!c.dead && (events & EPOLLOUT)) {
    write_control(peer);
  }
}

// ---- failures and teardown -----------------------------------------------------------------

void SocketTransport::peer_failed(int peer, const std::string& what, int os_error) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failed || p.draining) {
    return;
  }
  // What the peer wrote on its control socket before its connections broke comes first: an
  // abort notice (then the engine reports the original cause, not this symptom) or a goodbye
  // (then the peer left the group rather than died).
  if (p.control && !p.control->dead) {
    p.draining = true;
    read_control(peer);
    p.draining = false;
  }
  if (p.failed) {
    return;
  }
  p.failed = true;
  TransportEvent ev;
  ev.kind = TransportEvent::Kind::peer_failed;
  ev.peer = peer;
  ev.error = what;
  ev.os_error = os_error;
  ev.left = p.goodbye;
  events_.push_back(std::move(ev));
  close_peer(peer);
}

void SocketTransport::close_peer(int peer) noexcept {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.control) {
    Control& c = *p.control;
    if (c.registered) {
      loop_.remove(c.sock.fd());
      c.registered = false;
    }
    c.dead = true;
    c.sock.close();
    c.sendq.clear();
    c.posted.clear();
  }
  for (auto& s : p.data) {
    if (s->registered) {
      loop_.remove(s->sock.fd());
      s->registered = false;
    }
    s->dead = true;
    s->sock.close();
    s->sendq.clear();
    s->recvq.clear();
  }
}

void SocketTransport::drop_all() noexcept {
  for (auto& p : peers_) {
    for (auto& s : p.data) {
      s->sendq.clear();
      s->recvq.clear();
      s->send_off = 0;
      s->recv_off = 0;
      if (!s->dead) {
        update_interest(*s);
      }
    }
    if (p.control) {
      Control& c = *p.control;
      c.posted.clear();
      // A tagged send half written must still end on a frame boundary (abort notices follow
      // it); finish it from a private copy instead of the user's buffer. Unstarted ones go.
      std::deque<OutFrame> keep;
      for (auto& f : c.sendq) {
        if (f.token == 0) {
          keep.push_back(std::move(f));
        } else if (f.off > 0) {
          f.owned.assign(reinterpret_cast<const std::uint8_t*>(f.data),
                         reinterpret_cast<const std::uint8_t*>(f.data) + f.len);
          f.data = reinterpret_cast<const std::byte*>(f.owned.data());
          f.token = 0;
          keep.push_back(std::move(f));
        }
      }
      c.sendq = std::move(keep);
      if (c.in_body && c.body_token != 0 && c.body_error.empty()) {
        c.body_dst = nullptr;  // discard the rest of a matched recv's body
        c.body_token = 0;
      }
    }
  }
  reqs_.clear();
  free_reqs_.clear();
  completed_.clear();
  events_.erase(std::remove_if(events_.begin(), events_.end(),
                               [](const TransportEvent& e) { return e.kind == TransportEvent::Kind::p2p_done; }),
                events_.end());
}

void SocketTransport::flush_control(Deadline until) {
  for (;;) {
    bool pending = false;
    for (int p = 0; p < size_; ++p) {
      const Peer& peer = peers_[static_cast<std::size_t>(p)];
      if (peer.control && !peer.control->dead && !peer.control->sendq.empty()) {
        pending = true;
      }
    }
    if (!pending || until.expired()) {
      return;
    }
    loop_.run_once(until);
  }
}

void SocketTransport::close_all() noexcept {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) {
      close_peer(p);
    }
  }
}

void SocketTransport::poll(Deadline until, std::vector<std::uint64_t>& completed,
                           std::vector<TransportEvent>& events) {
  const bool ready = !completed_.empty() || !events_.empty();
  loop_.run_once(ready ? Deadline::after(Duration::zero()) : until);
  completed.swap(completed_);
  completed_.clear();
  events.swap(events_);
  events_.clear();
}

}  // namespace chorus::tcp
