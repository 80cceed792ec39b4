// SPDX-License-Identifier: BSD-3-Clause
// SocketTransport: setup over the mesh, poll, failure detection that names the peer, and
// teardown. Collective streams are in data_streams.cpp, the control channel in
// control_channel.cpp.
#include "cpu/transports/socket/socket_transport.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <iterator>
#include <thread>
#include <utility>

#include "core/bytes.hpp"

namespace chorus::cpu {

SocketTransport::SocketTransport(int rank, int size, Mesh mesh, const std::vector<int>& host_ranks)
    : rank_(rank),
      size_(size),
      sockets_per_peer_(mesh.sockets_per_peer),
      local_address_(mesh.local_address),
      peers_(static_cast<std::size_t>(size)),
      max_links_(mesh.max_links),
      local_send_buffer_(mesh.local_send_buffer),
      discard_(64 * 1024) {
  for (const int p : host_ranks) {
    peers_[static_cast<std::size_t>(p)].same_host = true;
  }
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
    // Setup peers' links stay (both ends pin the same ones); an early link to another peer
    // (it dialed during our setup) is an ordinary one.
    peers_[static_cast<std::size_t>(p)].pinned = link.setup;
    pinned_links_ += link.setup ? 1 : 0;
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

void SocketTransport::make_queues(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.control) {
    p.control = std::make_unique<Control>();
    for (int i = 0; i < sockets_per_peer_; ++i) {
      auto s = std::make_unique<Stream>();
      s->peer = peer;
      p.data.push_back(std::move(s));
    }
  }
}

void SocketTransport::ensure_link(int peer) {
  make_queues(peer);
  Peer& p = peers_[static_cast<std::size_t>(peer)];
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
  p.last_used = ++uses_;
  if (!p.pinned) {
    ++open_links_;
  }
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
    if (p.same_host && local_send_buffer_ > 0) {
      s.sock.set_send_buffer(local_send_buffer_);  // see TcpGroupOptions::local_send_buffer_bytes
    }
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
  return p.control && p.control->registered && !p.control->dead && !p.failed &&
         p.release == Release::none;
}

std::optional<Clock::time_point> SocketTransport::last_heard(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!peer_connected(peer) || p.goodbye) {
    return std::nullopt;
  }
  return p.last_heard;
}

// ---- releasing idle links (CHORUS_MAX_PEER_SOCKETS) ----------------------------------------

bool SocketTransport::idle(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.control || !p.control->registered || p.control->dead) {
    return false;
  }
  const Control& c = *p.control;
  if (!c.sendq.empty() || !c.posted.empty() || c.msg_open || c.in_body || c.header_got != 0) {
    return false;
  }
  return std::all_of(p.data.begin(), p.data.end(),
                     [](const auto& s) { return s->sendq.empty() && s->recvq.empty(); });
}

void SocketTransport::enforce_link_bound() {
  const auto now = Clock::now();
  retry_release_ = Deadline::never();
  std::size_t closing = 0;
  for (const Peer& p : peers_) {
    closing += p.release != Release::none ? 1 : 0;
  }
  // Setup links count against the bound but are never released.
  while (open_links_ + pinned_links_ > max_links_ + closing) {
    int oldest = -1;
    for (int q = 0; q < size_; ++q) {
      const Peer& p = peers_[static_cast<std::size_t>(q)];
      if (q == rank_ || p.pinned || p.failed || p.release != Release::none || !idle(q)) {
        continue;
      }
      // A peer that refused was busy: ask again a little later, not in a tight loop.
      if (p.refused_at + kReleaseRetry > now) {
        retry_release_ = earliest(retry_release_, Deadline::at(p.refused_at + kReleaseRetry));
        continue;
      }
      if (oldest < 0 || p.last_used < peers_[static_cast<std::size_t>(oldest)].last_used) {
        oldest = q;
      }
    }
    if (oldest < 0) {
      return;  // every link is busy: the bound is met again once some go idle
    }
    Peer& p = peers_[static_cast<std::size_t>(oldest)];
    std::vector<std::uint8_t> counts;
    append_le(counts, p.sends, 8);
    append_le(counts, p.recvs, 8);
    p.release = Release::asked;
    ++closing;
    queue_frame(oldest, FrameType::link_release, std::move(counts));
  }
}

void SocketTransport::on_release_frame(int peer, FrameType type,
                                       const std::vector<std::uint8_t>& payload) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (type == FrameType::link_release) {
    // Agree only if nothing is in flight either way: the asker's counts mirror ours.
    const bool agree = payload.size() == 16 && !p.pinned && p.release != Release::agreed &&
                       idle(peer) && get_le(payload.data(), 8) == p.recvs &&
                       get_le(payload.data() + 8, 8) == p.sends;
    if (!agree) {
      queue_frame(peer, FrameType::link_release_no, {});
      return;
    }
    p.release = Release::agreed;
    p.release_when_flushed = true;
    queue_frame(peer, FrameType::link_release_ok, {});  // dropped once written
    return;
  }
  if (p.release != Release::asked) {
    return;  // we agreed to its own request meanwhile: the link is closing anyway
  }
  if (type == FrameType::link_release_ok) {
    p.release = Release::agreed;
    to_drop_.push_back(peer);
    return;
  }
  p.release = Release::none;  // busy on its side: keep the link
  p.refused_at = Clock::now();
  std::vector<std::function<void()>> waiting;
  waiting.swap(p.deferred);
  for (auto& post : waiting) {
    post();
  }
}

void SocketTransport::queue_frame(int peer, FrameType type, std::vector<std::uint8_t> payload) {
  Control& c = *peers_[static_cast<std::size_t>(peer)].control;
  OutFrame f;
  f.header = encode_header({type, 0, payload.size()});
  f.owned = std::move(payload);
  f.data = reinterpret_cast<const std::byte*>(f.owned.data());
  f.len = f.owned.size();
  const bool idle_queue = c.sendq.empty();
  // Ahead of every tagged chunk not yet started, behind the frame being written (the stream
  // must stay on frame boundaries) and behind earlier control frames (their order holds: an
  // abort notice never overtakes the status reply before it).
  auto at = c.sendq.begin();
  if (at != c.sendq.end() && at->off > 0) {
    ++at;
  }
  while (at != c.sendq.end() && !at->tagged) {
    ++at;
  }
  c.sendq.insert(at, std::move(f));
  if (idle_queue) {
    write_control(peer);
  }
}

void SocketTransport::drop_link(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.release != Release::agreed || p.failed) {
    return;
  }
  // Messages that arrived before their recv survive the link.
  std::deque<Unexpected> unexpected = std::move(p.control->unexpected);
  if (p.control->registered) {
    loop_.remove(p.control->sock.fd());
  }
  for (auto& s : p.data) {
    if (s->registered) {
      loop_.remove(s->sock.fd());
    }
  }
  p.control.reset();
  p.data.clear();
  p.link_requested = false;
  p.release = Release::none;
  p.release_when_flushed = false;
  --open_links_;
  if (connector_) {
    connector_->release(peer);
  }
  if (!unexpected.empty()) {
    make_queues(peer);
    p.control->unexpected = std::move(unexpected);
  }
  std::vector<std::function<void()>> waiting;
  waiting.swap(p.deferred);
  for (auto& post : waiting) {
    post();
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
  p.draining = true;
  if (p.control && p.control->registered && !p.control->dead) {
    read_control(peer);
  }
  // And what it sent on the data sockets before it went: a peer that finished its part of an
  // op and exited completed that op here too.
  for (auto& s : p.data) {
    if (!s->dead && s->registered && !s->recvq.empty()) {
      read_stream(*s);
    }
  }
  p.draining = false;
  if (p.failed) {
    return;
  }
  p.failed = true;
  if (p.release == Release::asked || p.release == Release::agreed) {
    p.release = Release::none;
    std::vector<std::function<void()>> waiting;
    waiting.swap(p.deferred);
    for (auto& post : waiting) {
      post();  // each fails at once: the peer has failed
    }
  }
  TransportEvent ev;
  ev.kind = TransportEvent::Kind::peer_failed;
  ev.peer = peer;
  ev.error = what;
  ev.os_error = os_error;
  ev.left = p.goodbye;
  emit(std::move(ev));
  close_peer(peer);
}

void SocketTransport::emit(TransportEvent ev) {
  const bool news = ev.kind == TransportEvent::Kind::control &&
                    (ev.frame == FrameType::abort || ev.frame == FrameType::goodbye);
  if (news || news_held_for_.count(ev.peer) != 0) {
    news_held_for_.insert(ev.peer);  // what follows from that peer keeps its place behind it
    held_events_.push_back(std::move(ev));
    return;
  }
  events_.push_back(std::move(ev));
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

void SocketTransport::sever(int peer) noexcept {
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
        update_interest(*s, false);
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
  any_posted_.clear();
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

bool SocketTransport::spin(Deadline wait_until) {
  if (spin_ <= std::chrono::microseconds::zero() || wait_until.expired()) {
    return false;
  }
  const Deadline stop = earliest(wait_until, Deadline::at(Clock::now() + spin_));
  for (;;) {
    if (loop_.poll_ready() > 0 || !completed_.empty() || !events_.empty()) {
      return true;
    }
    if (stop.expired()) {
      return false;
    }
    // A peer of this rank's op may be waiting for this core (4 ranks on 2 cores).
    std::this_thread::yield();
  }
}

void SocketTransport::poll(Deadline until, std::vector<std::uint64_t>& completed,
                           std::vector<TransportEvent>& events) {
  take_links();
  std::move(held_events_.begin(), held_events_.end(), std::back_inserter(events_));
  held_events_.clear();
  news_held_for_.clear();
  std::vector<int> lost;
  lost.swap(lost_);
  for (int peer : lost) {
    peer_failed(peer,
                "the connection was closed without the peer leaving the group: the process "
                "died, was killed, or exited without destroying its group",
                0);
  }
  move_posted();
  const Deadline wait_until = earliest(until, retry_release_);
  if (!completed_.empty() || !events_.empty()) {
    loop_.poll_ready();
  } else if (!spin(wait_until)) {
    loop_.run_once(wait_until);
  }
  take_links();
  std::vector<int> dropping;
  dropping.swap(to_drop_);
  for (int peer : dropping) {
    drop_link(peer);
  }
  if (max_links_ != 0 && open_links_ + pinned_links_ > max_links_) {
    enforce_link_bound();
  }
  // Appends: a decorator may have put its own completions there already.
  completed.insert(completed.end(), completed_.begin(), completed_.end());
  completed_.clear();
  std::move(events_.begin(), events_.end(), std::back_inserter(events));
  events_.clear();
}

}  // namespace chorus::cpu
