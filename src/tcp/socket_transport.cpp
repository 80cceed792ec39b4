// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport: setup over the mesh, poll, failure detection that names the peer, and
// teardown. Collective streams are in data_streams.cpp, the control channel in
// control_channel.cpp.
#include "tcp/socket_transport.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <iterator>

namespace chorus::tcp {

SocketTransport::SocketTransport(int rank, int size, Mesh mesh)
    : rank_(rank),
      size_(size),
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

std::optional<Clock::time_point> SocketTransport::last_heard(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!peer_connected(peer) || p.goodbye) {
    return std::nullopt;
  }
  return p.last_heard;
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

void SocketTransport::reset_link(int peer) noexcept {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failed || peer == rank_) {
    return;
  }
  p.failed = true;
  close_peer(peer);  // the peer reads EOF without a goodbye: a dead rank
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
        if (!f.tagged) {
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
      if (c.msg_open && c.msg_token != 0 && c.msg_error.empty()) {
        // Discard the rest of a matched recv's message: its buffer is the user's.
        if (c.in_body && (c.frame.type == FrameType::p2p || c.frame.type == FrameType::p2p_more)) {
          c.body_dst = nullptr;
        }
        c.msg_next = nullptr;
        c.msg_token = 0;
        c.msg_dropped = true;
      }
    }
  }
  reqs_.clear();
  free_reqs_.clear();
  completed_.clear();
  events_.erase(std::remove_if(events_.begin(), events_.end(),
                               [](const TransportEvent& e) {
                                 return e.kind == TransportEvent::Kind::p2p_done;
                               }),
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
  // Appends: a decorator may have put its own completions there already.
  completed.insert(completed.end(), completed_.begin(), completed_.end());
  completed_.clear();
  std::move(events_.begin(), events_.end(), std::back_inserter(events));
  events_.clear();
}

}  // namespace chorus::tcp
