// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/shm/shm_transport.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/check.hpp"
#include "core/futex.hpp"

namespace chorus::cpu {
namespace {
std::uint64_t align_up(std::uint64_t at, std::size_t align) {
  return (at + align - 1) / align * align;
}
}  // namespace

ShmTransport::ShmTransport(int rank, int size, std::vector<int> locals,
                           std::shared_ptr<ShmSegment> segment,
                           std::unique_ptr<EngineTransport> inner, bool board)
    : ForwardingTransport(std::move(inner)),
      other_hosts_(static_cast<int>(locals.size()) < size),
      segment_(std::move(segment)),
      board_(board ? std::make_unique<SlotBoard>(segment_, rank, size) : nullptr) {
  const auto me = std::find(locals.begin(), locals.end(), rank);
  local_ = static_cast<int>(me - locals.begin());
  CHORUS_CHECK(segment_->ring_bytes() % kMessageAlign == 0, "ring of {} bytes",
               segment_->ring_bytes());
  link_index_.assign(static_cast<std::size_t>(locals.back()) + 1, -1);
  for (int i = 0; i < static_cast<int>(locals.size()); ++i) {
    if (i == local_) {
      continue;
    }
    link_index_[static_cast<std::size_t>(locals[static_cast<std::size_t>(i)])] =
        static_cast<int>(links_.size());
    Link link;
    link.local = i;
    link.rank = locals[static_cast<std::size_t>(i)];
    link.out = &segment_->ring(local_, i);
    link.out_data = segment_->ring_data(local_, i);
    link.in = &segment_->ring(i, local_);
    link.in_data = segment_->ring_data(i, local_);
    links_.push_back(std::move(link));
  }
}

ShmTransport::Link* ShmTransport::link_of(int peer) noexcept {
  if (peer < 0 || static_cast<std::size_t>(peer) >= link_index_.size()) {
    return nullptr;
  }
  const int i = link_index_[static_cast<std::size_t>(peer)];
  return i < 0 ? nullptr : &links_[static_cast<std::size_t>(i)];
}

void ShmTransport::post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) {
  Link* link = link_of(peer);
  if (link == nullptr) {
    inner_->post_send(peer, data, bytes, token);
    return;
  }
  if (!link->dropped) {
    link->sends.push_back({static_cast<std::byte*>(const_cast<void*>(data)), bytes, 0, token});
  }
}

void ShmTransport::post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) {
  Link* link = link_of(peer);
  if (link == nullptr) {
    inner_->post_recv(peer, data, bytes, token);
    return;
  }
  if (!link->dropped) {
    link->recvs.push_back({static_cast<std::byte*>(data), bytes, 0, token});
  }
}

bool ShmTransport::post_recv_reduce(int peer, const ReduceOnArrival& r, std::uint64_t token) {
  Link* link = link_of(peer);
  if (link == nullptr) {
    return inner_->post_recv_reduce(peer, r, token);
  }
  if (!link->dropped) {
    const std::size_t unit = element_size(r.dtype);
    Message m{static_cast<std::byte*>(r.out), r.count * unit, 0, token};
    m.reduce = r;
    m.unit = unit;
    link->recvs.push_back(m);
  }
  return true;
}

bool ShmTransport::pending() const noexcept {
  return awaiting_board_ || std::any_of(links_.begin(), links_.end(), [](const Link& l) {
           return !l.sends.empty() || !l.recvs.empty();
         });
}

ShmTransport::Window ShmTransport::writable(const Link& link) const noexcept {
  const Message& m = link.sends.front();
  const std::size_t cap = segment_->ring_bytes();
  const std::uint64_t head = link.out->head.load(std::memory_order_relaxed);
  const std::uint64_t tail = link.out->tail.load(std::memory_order_acquire);
  const std::uint64_t at = m.done == 0 ? align_up(head, kMessageAlign) : head;
  const std::uint64_t used = at - tail;
  const std::size_t room = used >= cap ? 0 : cap - static_cast<std::size_t>(used);
  return {at, std::min({room, m.bytes - m.done, kChunkBytes})};
}

ShmTransport::Window ShmTransport::readable(const Link& link) const noexcept {
  const Message& m = link.recvs.front();
  const std::uint64_t tail = link.in->tail.load(std::memory_order_relaxed);
  const std::uint64_t head = link.in->head.load(std::memory_order_acquire);
  const std::uint64_t at = m.done == 0 ? align_up(tail, kMessageAlign) : tail;
  const std::size_t there = head > at ? static_cast<std::size_t>(head - at) : 0;
  const std::size_t n = std::min({there, m.bytes - m.done, kChunkBytes});
  return {at, n - n % m.unit};  // a reduction takes whole elements only
}

bool ShmTransport::push(Link& link, std::vector<std::uint64_t>& completed) {
  if (link.sends.empty()) {
    return false;
  }
  Message& m = link.sends.front();
  const std::size_t cap = segment_->ring_bytes();
  const auto [start, n] = writable(link);
  if (n > 0) {
    const std::size_t at = static_cast<std::size_t>(start % cap);
    const std::size_t first = std::min(n, cap - at);
    std::memcpy(link.out_data + at, m.data + m.done, first);
    std::memcpy(link.out_data, m.data + m.done + first, n - first);
    link.out->head.store(start + n, std::memory_order_release);
    m.done += n;
    notify(link.local);
  }
  if (m.done < m.bytes) {
    return n > 0;
  }
  completed.push_back(m.token);
  link.sends.pop_front();
  return true;
}

void ShmTransport::reduce_from_ring(Message& m, const std::byte* ring_at, std::size_t bytes) const {
  if (bytes == 0) {
    return;
  }
  const ReduceOnArrival& r = *m.reduce;
  reduce_arrived(r, m.data + m.done, static_cast<const std::byte*>(r.local) + m.done, ring_at,
                 bytes / m.unit);
  m.done += bytes;
}

bool ShmTransport::pull(Link& link, std::vector<std::uint64_t>& completed) {
  if (link.recvs.empty()) {
    return false;
  }
  Message& m = link.recvs.front();
  const std::size_t cap = segment_->ring_bytes();
  const auto [start, n] = readable(link);
  if (n > 0) {
    // Elements never straddle the ring's end: messages start aligned, and cap is a multiple
    // of every element size.
    const std::size_t at = static_cast<std::size_t>(start % cap);
    const std::size_t first = std::min(n, cap - at);
    if (m.reduce) {
      reduce_from_ring(m, link.in_data + at, first);
      reduce_from_ring(m, link.in_data, n - first);
    } else {
      std::memcpy(m.data + m.done, link.in_data + at, first);
      std::memcpy(m.data + m.done + first, link.in_data, n - first);
      m.done += n;
    }
    link.in->tail.store(start + n, std::memory_order_release);
    notify(link.local);
  }
  if (m.done < m.bytes) {
    return n > 0;
  }
  completed.push_back(m.token);
  link.recvs.pop_front();
  return true;
}

bool ShmTransport::progress(std::vector<std::uint64_t>& completed) {
  bool any = false;
  for (;;) {
    bool moved = false;
    for (Link& link : links_) {
      moved |= push(link, completed);
      moved |= pull(link, completed);
    }
    any |= moved;
    // Hand completions to the engine at once: it posts the next step of the schedule.
    if (!moved || !completed.empty()) {
      if (any && spin_ > std::chrono::microseconds::zero()) {
        last_moved_ = Clock::now();
      }
      return any;
    }
  }
}

void ShmTransport::notify(int local) noexcept { wake_if_sleeping(segment_->wake(local)); }

void ShmTransport::wakeup() noexcept {
  // The bump always happens (a sleep about to start sees the word changed and returns); the
  // system call only when this rank's engine is asleep on it.
  WakeWord& w = segment_->wake(local_);
  w.seq.fetch_add(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w.sleeping.load(std::memory_order_relaxed) != 0) {
    futex_wake(w.seq);
  }
  inner_->wakeup();
}

void ShmTransport::sleep(Deadline until, std::vector<std::uint64_t>& completed) {
  // Look again for up to spin_ after the last byte moved, yielding the core between looks
  // (the peer this rank waits for may need it: 4 ranks on 2 cores). Only after a move: a rank
  // woken by its socket slice while it waits for a late peer goes back to sleep at once.
  const Clock::time_point spin_until = last_moved_ + spin_;
  while (!awaiting_board_ && Clock::now() < spin_until) {
    if (progress(completed)) {
      return;
    }
    std::this_thread::yield();
  }
  WakeWord& w = segment_->wake(local_);
  const std::uint32_t seq = w.seq.load(std::memory_order_acquire);
  w.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!progress(completed)) {
    futex_wait(w.seq, seq, std::min(until.remaining(), kSocketSlice));
  }
  w.sleeping.store(0, std::memory_order_relaxed);
}

void ShmTransport::poll(Deadline until, std::vector<std::uint64_t>& completed,
                        std::vector<TransportEvent>& events) {
  const std::size_t before = completed.size();
  bool moved = progress(completed);
  if (!pending()) {
    inner_->poll(completed.size() > before ? Deadline::after(Duration::zero()) : until, completed,
                 events);
    watch_departures(events);
    hold_while_readable(events);
    return;
  }
  if (!moved && completed.size() == before && !until.expired()) {
    sleep(until, completed);
    progress(completed);
  }
  // The sockets are looked at on every round, without waiting: failures and control frames
  // arrive there.
  inner_->poll(Deadline::after(Duration::zero()), completed, events);
  watch_departures(events);
  hold_while_readable(events);
}

void ShmTransport::hold_while_readable(std::vector<TransportEvent>& events) {
  if (held_failures_.empty() && events.empty()) {
    return;
  }
  auto readable_from = [this](int peer) {
    Link* link = link_of(peer);
    return link != nullptr && !link->recvs.empty() && readable(*link).bytes > 0;
  };
  // Held failures whose rings have nothing left for a posted receive go up now, first.
  std::vector<TransportEvent> out;
  std::vector<TransportEvent> still_held;
  for (TransportEvent& ev : held_failures_) {
    (readable_from(ev.peer) ? still_held : out).push_back(std::move(ev));
  }
  for (TransportEvent& ev : events) {
    const bool hold =
        ev.kind == TransportEvent::Kind::peer_failed && !ev.left && readable_from(ev.peer);
    (hold ? still_held : out).push_back(std::move(ev));
  }
  held_failures_.swap(still_held);
  events.swap(out);
}

bool ShmTransport::can_move(const Link& link) const noexcept {
  return (!link.recvs.empty() && readable(link).bytes > 0) ||
         (!link.sends.empty() && writable(link).bytes > 0);
}

void ShmTransport::watch_departures(std::vector<TransportEvent>& events) {
  for (const TransportEvent& ev : events) {
    if (ev.kind == TransportEvent::Kind::control && ev.frame == FrameType::goodbye) {
      if (Link* link = link_of(ev.peer)) {
        link->left = true;
      }
    }
  }
  for (Link& link : links_) {
    if (!link.left || link.reported || (link.sends.empty() && link.recvs.empty()) ||
        can_move(link)) {
      continue;
    }
    link.reported = true;
    link.sends.clear();
    link.recvs.clear();
    TransportEvent ev;
    ev.kind = TransportEvent::Kind::peer_failed;
    ev.peer = link.rank;
    ev.error = "the peer left the group with this rank's transfers to it unfinished";
    ev.left = true;
    events.push_back(std::move(ev));
  }
}

void ShmTransport::drop_all() noexcept {
  for (Link& link : links_) {
    link.sends.clear();
    link.recvs.clear();
  }
  inner_->drop_all();
}

void ShmTransport::sever(int peer) noexcept {
  if (Link* link = link_of(peer)) {
    link->sends.clear();
    link->recvs.clear();
    link->dropped = true;
  }
  inner_->sever(peer);
}

}  // namespace chorus::cpu
