// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport: setup over the mesh, poll, failure detection that names the peer, and
// teardown. Collective streams are in data_streams.cpp, the control channel in
// control_channel.cpp.
#include "tcp/socket_transport.hpp"

#include <sys/epoll.h>

#include <utility>

#include <algorithm>
#include <iterator>

namespace chorus::tcp {

SocketTransport::SocketTransport(int rank, int size, Mesh mesh)
    : rank_(rank),
      size_(size),
      sockets_per_peer_(mesh.sockets_per_peer),
      local_address_(mesh.local_address),
      peers_(static_cast<std::size_t>(size)),
      discard_(64 * 1024) {
  for (int p = 0; p < size; ++p) {
    PeerLink& link = mesh.peers[static_cast<std::size_t>(p)];
    peers_[static_cast<std::size_t>(p)].address = link.address;
    if (p == rank_ || !link.control.valid()) {
      continue;
    }
    std::vector<net::Socket> sockets;
    sockets.push_back(std::move(link.control));
    for (auto& sock : link.data) {
      sockets.push_back(std::move(sock));
    }
    install_link(p, std::move(sockets), link.address);
  }
  connector_ = std::move(mesh.connector);
  if (connector_) {
    connector_->set_notify([this] { loop_.wakeup(); });
  }
}

bool SocketTransport::usable(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  return !p.failed && !(p.control && p.control->dead);
}

void SocketTransport::ensure_link(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.control) {
    p.control = std::make_unique<Control>();
    for (int i = 0; i < sockets_per_peer_; ++i) {
      auto s = std::make_unique<Stream>();
      s->peer = peer;
      p.data.push_back(std::move(s));
    }
  }
  if (!p.link_requested && !p.failed && connector_) {
    p.link_requested = true;
    connector_->request(peer);
  }
}

void SocketTransport::install_link(int peer, std::vector<net::Socket> sockets,
                                   const std::string& address) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failed || static_cast<int>(sockets.size()) != sockets_per_peer_ + 1 ||
      (p.control && p.control->registered)) {
    return;  // too late (the peer failed meanwhile), or a duplicate: the sockets close
  }
  p.link_requested = true;
  ensure_link(peer);
  p.address = address;
  p.last_heard = Clock::now();
  sockets[0].set_nodelay(true);
  Control& c = *p.control;
  c.sock = std::move(sockets[0]);
  c.interest = EPOLLIN;
  loop_.add(c.sock.fd(), EPOLLIN, [this, peer](std::uint32_t ev) { on_control(peer, ev); });
  c.registered = true;
  for (int i = 0; i < sockets_per_peer_; ++i) {
    Stream& s = *p.data[static_cast<std::size_t>(i)];
    s.sock = std::move(sockets[static_cast<std::size_t>(i) + 1]);
    s.sock.set_nodelay(true);
    Stream* raw = &s;
    loop_.add(s.sock.fd(), 0, [this, raw](std::uint32_t ev) { on_stream(*raw, ev); });
    s.registered = true;
  }
  // What was queued while the link was being made starts moving.
  write_control(peer);
  for (auto& s : p.data) {
    if (!s->sendq.empty() && !write_stream(*s)) {
      return;
    }
    if (!s->recvq.empty() && !read_stream(*s)) {
      return;
    }
  }
}

void SocketTransport::take_links() {
  if (!connector_) {
    return;
  }
  std::vector<NewLink> links;
  std::vector<LinkFailure> failures;
  connector_->take(links, failures);
  for (NewLink& l : links) {
    install_link(l.peer, std::move(l.sockets), l.address);
  }
  for (const LinkFailure& f : failures) {
    Peer& p = peers_[static_cast<std::size_t>(f.peer)];
    if (p.address.empty()) {
      p.address = connector_->address_of(f.peer);
    }
    peer_failed(f.peer, f.message, f.os_error);
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
  return p.control && p.control->registered && !p.control->dead && !p.failed;
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
  if (p.control && p.control->registered && !p.control->dead) {
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
      if (peer_connected(p) && !peer.control->sendq.empty()) {
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
  take_links();
  const bool ready = !completed_.empty() || !events_.empty();
  loop_.run_once(ready ? Deadline::after(Duration::zero()) : until);
  take_links();
  // Appends: a decorator may have put its own completions there already.
  completed.insert(completed.end(), completed_.begin(), completed_.end());
  completed_.clear();
  std::move(events_.begin(), events_.end(), std::back_inserter(events));
  events_.clear();
}

}  // namespace chorus::tcp
