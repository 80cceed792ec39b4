// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport, control channel: framed messages on one socket per peer (wire.hpp).
// Tagged send/recv payloads and control frames share it; control frames are queued ahead of
// every tagged payload that has not started (see send_control), so an abort notice or a
// status reply waits at most for the rest of the one frame being written, however many sends
// are queued. The socket is always read: a peer's notices and its death are seen even when no
// op involves it.
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "tcp/socket_transport.hpp"

namespace chorus::tcp {
namespace {
std::string size_mismatch(int peer, std::size_t sent, std::uint32_t tag, std::size_t expected) {
  return fmt::format("rank {} sent {} bytes with tag {} but this recv expects {} bytes", peer, sent, tag,
                     expected);
}
}  // namespace

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
  // Ahead of every tagged payload not yet started, behind the frame being written (the
  // stream must stay on frame boundaries) and behind earlier control frames (their order
  // holds: an abort notice never overtakes the status reply before it).
  auto at = c.sendq.begin();
  if (at != c.sendq.end() && at->off > 0) {
    ++at;
  }
  while (at != c.sendq.end() && at->token == 0) {
    ++at;
  }
  c.sendq.insert(at, std::move(f));
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

}  // namespace chorus::tcp
