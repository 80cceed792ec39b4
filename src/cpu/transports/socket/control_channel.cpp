// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport, control channel: framed messages on one socket per peer (wire.hpp).
// Tagged send/recv payloads and control frames share it. A tagged message goes out in chunks of
// at most kP2pChunkBytes, one frame each (wire.hpp), and control frames are queued ahead of
// every chunk that has not started (see send_control), so an abort notice or a status reply
// waits at most for the rest of one chunk, however large or many the queued sends are. The socket
// is always read: a peer's notices and its death are seen even when no op involves it.
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "cpu/transports/socket/socket_transport.hpp"

namespace chorus::cpu {
namespace {
std::string size_mismatch(int peer, std::size_t sent, std::uint32_t tag, std::size_t expected) {
  return fmt::format("rank {} sent {} bytes with tag {} but this recv expects {} bytes", peer, sent,
                     tag, expected);
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
  if (!usable(peer)) {
    p2p_done(peer, token,
             p.goodbye ? "the peer left the group" : "the connection to the peer is gone");
    return;
  }
  if (defer_if_closing(peer, [=, this] { send_p2p(peer, tag, data, bytes, token); })) {
    return;
  }
  ensure_link(peer);
  p.last_used = ++uses_;
  // One frame per chunk (wire.hpp), so that control frames can be queued between them.
  const bool idle = p.control->sendq.empty();
  const auto* base = static_cast<const std::byte*>(data);
  std::size_t off = 0;
  do {
    OutFrame f;
    f.len = std::min(bytes - off, kP2pChunkBytes);
    f.header = off == 0 ? encode_header({FrameType::p2p, tag, bytes})
                        : encode_header({FrameType::p2p_more, tag, f.len});
    f.data = base + off;
    f.tagged = true;
    off += f.len;
    f.token = off == bytes ? token : 0;
    p.control->sendq.push_back(std::move(f));
  } while (off < bytes);
  if (idle) {
    write_control(peer);
  }
}

void SocketTransport::recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                               std::uint64_t token) {
  if (peer == kAnyPeer) {
    if (!recv_buffered_from_any(tag, data, bytes, token)) {
      any_posted_.push_back({tag, static_cast<std::byte*>(data), bytes, token, ++p2p_posts_});
    }
    return;
  }
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  // A message that arrived before its recv is delivered even if its sender is gone since.
  if (p.control) {
    Control& c = *p.control;
    auto it = std::find_if(c.unexpected.begin(), c.unexpected.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it != c.unexpected.end()) {
      deliver_buffered(peer, it->bytes, tag, data, bytes, token);
      c.unexpected.erase(it);
      return;
    }
  }
  if (!usable(peer)) {
    p2p_done(peer, token,
             p.goodbye ? "the peer left the group" : "the connection to the peer is gone");
    return;
  }
  if (defer_if_closing(peer, [=, this] { recv_p2p(peer, tag, data, bytes, token); })) {
    return;
  }
  ensure_link(peer);
  p.last_used = ++uses_;
  p.control->posted.push_back({tag, static_cast<std::byte*>(data), bytes, token, ++p2p_posts_});
}

bool SocketTransport::recv_buffered_from_any(std::uint32_t tag, void* data, std::size_t bytes,
                                             std::uint64_t token) {
  int from = -1;
  std::deque<Unexpected>::iterator first;
  for (int peer = 0; peer < static_cast<int>(peers_.size()); ++peer) {
    const auto& control = peers_[static_cast<std::size_t>(peer)].control;
    if (!control) {
      continue;
    }
    auto it = std::find_if(control->unexpected.begin(), control->unexpected.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it != control->unexpected.end() && (from < 0 || it->order < first->order)) {
      from = peer;
      first = it;
    }
  }
  if (from < 0) {
    return false;
  }
  deliver_buffered(from, first->bytes, tag, data, bytes, token);
  peers_[static_cast<std::size_t>(from)].control->unexpected.erase(first);
  return true;
}

void SocketTransport::deliver_buffered(int peer, const std::vector<std::uint8_t>& message,
                                       std::uint32_t tag, void* data, std::size_t bytes,
                                       std::uint64_t token) {
  std::string error;
  if (message.size() != bytes) {
    error = size_mismatch(peer, message.size(), tag, bytes);
  } else if (bytes > 0) {
    std::memcpy(data, message.data(), bytes);
  }
  p2p_done(peer, token, std::move(error));
}

std::optional<SocketTransport::P2pRecv> SocketTransport::take_posted(int peer, std::uint32_t tag) {
  auto& own = peers_[static_cast<std::size_t>(peer)].control->posted;
  const auto matches = [&](const P2pRecv& r) { return r.tag == tag; };
  auto mine = std::find_if(own.begin(), own.end(), matches);
  auto any = std::find_if(any_posted_.begin(), any_posted_.end(), matches);
  const bool take_any = any != any_posted_.end() && (mine == own.end() || any->order < mine->order);
  if (take_any) {
    P2pRecv r = *any;
    any_posted_.erase(any);
    return r;
  }
  if (mine == own.end()) {
    return std::nullopt;
  }
  P2pRecv r = *mine;
  own.erase(mine);
  return r;
}

void SocketTransport::send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) {
  if (!peer_connected(peer)) {
    return;
  }
  queue_frame(peer, type, std::move(payload));
}

void SocketTransport::update_control_interest(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  if (c.dead || !c.registered) {
    return;
  }
  const std::uint32_t want =
      EPOLLIN | (c.sendq.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (want != c.interest) {
    loop_.modify(c.sock.fd(), want);
    c.interest = want;
  }
}

void SocketTransport::write_control(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  if (!c.registered) {
    return;  // no link yet: the queue goes out once it is made
  }
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
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.release_when_flushed && c.sendq.empty()) {
    p.release_when_flushed = false;
    to_drop_.push_back(peer);  // our "ok" is out: close at the end of this poll
  }
}

// Sets up where the body of the frame whose header was just read goes. False if the peer
// broke the protocol (then the peer has failed).
bool SocketTransport::start_frame(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  const auto protocol_error = [&](const char* why) {
    peer_failed(
        peer,
        fmt::format(
            "protocol error on the control connection: {} (frame type {}, tag {}, {} bytes)", why,
            static_cast<std::uint32_t>(c.frame.type), c.frame.tag, c.frame.length),
        0);
    return false;
  };
  switch (c.frame.type) {
    case FrameType::p2p: {
      if (c.msg_open) {
        return protocol_error("a tagged message started before the previous one ended");
      }
      c.msg_open = true;
      c.msg_tag = c.frame.tag;
      c.msg_token = 0;
      c.msg_dropped = false;
      c.msg_error.clear();
      c.msg_buf.clear();
      std::byte* dst = nullptr;
      const std::optional<P2pRecv> recv = take_posted(peer, c.frame.tag);
      if (!recv) {
        c.msg_buf.assign(c.frame.length, 0);
        dst = reinterpret_cast<std::byte*>(c.msg_buf.data());
      } else if (recv->bytes != c.frame.length) {
        c.msg_error = size_mismatch(peer, c.frame.length, c.frame.tag, recv->bytes);
        c.msg_token = recv->token;
      } else {
        dst = recv->data;
        c.msg_token = recv->token;
      }
      c.body_len = std::min<std::size_t>(c.frame.length, kP2pChunkBytes);
      c.msg_left = c.frame.length - c.body_len;
      c.body_dst = dst;
      c.msg_next = dst ? dst + c.body_len : nullptr;
      return true;
    }
    case FrameType::p2p_more:
      if (!c.msg_open || c.frame.tag != c.msg_tag || c.frame.length == 0 ||
          c.frame.length > std::min<std::size_t>(c.msg_left, kP2pChunkBytes)) {
        return protocol_error("a tagged chunk that continues no open message, or too long");
      }
      c.body_len = c.frame.length;
      c.body_dst = c.msg_next;
      c.msg_left -= c.body_len;
      if (c.msg_next) {
        c.msg_next += c.body_len;
      }
      return true;
    case FrameType::abort:
    case FrameType::goodbye:
    case FrameType::status_request:
    case FrameType::status_reply:
    case FrameType::heartbeat:
    case FrameType::link_release:
    case FrameType::link_release_ok:
    case FrameType::link_release_no:
      if (c.frame.length > kMaxControlPayload) {
        return protocol_error("a control frame over the size limit");
      }
      c.body_len = c.frame.length;
      c.body_buf.assign(c.frame.length, 0);
      c.body_dst = reinterpret_cast<std::byte*>(c.body_buf.data());
      return true;
  }
  return protocol_error("an unknown frame type");
}

void SocketTransport::read_control(int peer) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  if (!c.registered) {
    return;
  }
  std::size_t moved = 0;
  const Peer& owner = peers_[static_cast<std::size_t>(peer)];
  // An agreed release stops reading: the peer's end closes right after its last frame.
  while (!c.dead && moved < kIoBudget && owner.release != Release::agreed) {
    if (!c.in_body) {
      const net::IoResult r =
          c.sock.read(c.header.data() + c.header_got, kFrameHeaderBytes - c.header_got);
      if (r.would_block()) {
        return;
      }
      Peer& p = peers_[static_cast<std::size_t>(peer)];
      const bool ended = r.closed() || (r.ok() && r.bytes == 0);
      if ((ended || !r.ok()) && p.goodbye && c.header_got == 0) {
        // The peer left the group in order; its data sockets close next. A reset instead of
        // an orderly end means only that it closed with our last frames (a heartbeat) unread.
        c.dead = true;
        loop_.remove(c.sock.fd());
        c.registered = false;
        c.sock.close();
        return;
      }
      if (ended) {
        // Reported at the next poll: what the peer sent on its data sockets before it went may
        // complete the op in hand once the engine has posted its next receive (a peer that
        // did its part and exited is not a failure of that op).
        if (!p.lost) {
          p.lost = true;
          lost_.push_back(peer);
        }
        c.dead = true;
        loop_.remove(c.sock.fd());
        c.registered = false;
        c.sock.close();
        return;
      }
      if (!r.ok()) {
        peer_failed(peer, "receive failed: " + r.describe(), r.os_error);
        return;
      }
      p.last_heard = Clock::now();
      c.header_got += r.bytes;
      if (c.header_got < kFrameHeaderBytes) {
        continue;
      }
      c.header_got = 0;
      c.frame = decode_header(c.header.data());
      c.in_body = true;
      c.body_got = 0;
      c.body_dst = nullptr;
      if (!start_frame(peer)) {
        return;
      }
    }
    if (c.body_got < c.body_len) {
      const std::size_t want = c.body_len - c.body_got;
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
      peers_[static_cast<std::size_t>(peer)].last_heard = Clock::now();
      c.body_got += r.bytes;
      moved += r.bytes;
    }
    if (c.body_got == c.body_len) {
      control_frame_complete(peer);
    }
  }
}

void SocketTransport::control_frame_complete(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Control& c = *p.control;
  c.in_body = false;
  if (c.frame.type == FrameType::p2p || c.frame.type == FrameType::p2p_more) {
    if (c.msg_left > 0) {
      return;  // more chunks to come
    }
    c.msg_open = false;
    if (c.msg_token != 0) {
      p2p_done(peer, c.msg_token, std::move(c.msg_error));
      return;
    }
    if (c.msg_dropped) {
      return;  // its recv was dropped with the group
    }
    // Unexpected: a recv may have been posted while the body was arriving.
    const std::optional<P2pRecv> recv = take_posted(peer, c.msg_tag);
    if (!recv) {
      c.unexpected.push_back({c.msg_tag, std::move(c.msg_buf), ++p2p_arrivals_});
      return;
    }
    deliver_buffered(peer, c.msg_buf, c.msg_tag, recv->data, recv->bytes, recv->token);
    return;
  }
  if (c.frame.type == FrameType::heartbeat) {
    return;  // it was heard (read_control noted the time); nothing for the engine
  }
  if (c.frame.type == FrameType::link_release || c.frame.type == FrameType::link_release_ok ||
      c.frame.type == FrameType::link_release_no) {
    on_release_frame(peer, c.frame.type, c.body_buf);
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
  emit(std::move(ev));
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

}  // namespace chorus::cpu
