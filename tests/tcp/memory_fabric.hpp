// SPDX-License-Identifier: BSD-3-Clause
// MemoryFabric: an in-memory EngineTransport for n ranks in one process, with injectable
// faults, for deterministic tests of the engine's failure protocol. Each rank's Engine runs on
// its own thread; one mutex guards the whole fabric, and a rank's poll() sleeps on a condition
// variable until something arrives for it, it is woken, or its deadline passes.
//
// Model: what one rank sends another arrives in sending order, and across links in the order
// it was sent (one inbox per rank). Collective streams are rendezvous (a message moves when
// both sides posted it). A link's failure arrives after what was sent on it before.
// Faults (any thread): drop_link (silent: nothing crosses, nobody is told), reset_link (both
// ends get peer_failed), crash (every link of a rank resets, as SIGKILL), hold/release
// (delay: a link's traffic waits), stall/unstall (a rank neither reads nor writes), and
// corrupt_next_header (the next control frame is garbage: a protocol error at the receiver).
// Scripted ranks (no engine): inject() and inject_close() deliver news as if a rank sent it.
//
// endpoint(r) is rank r's transport; layer() is the fabric as the bottom entry of a transport
// table (transport_stack.hpp), so a test builds a stack as production does, e.g. the fault
// transport over the fabric: build_stack({fabric.layer(), cpu::fault_layer()}, ctx).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cpu/transports/transport.hpp"
#include "cpu/transports/transport_stack.hpp"

namespace chorus::test {

class MemoryFabric {
 public:
  explicit MemoryFabric(int n)
      : n_(n), links_(static_cast<std::size_t>(n * n)), ranks_(static_cast<std::size_t>(n)) {
    for (auto& r : ranks_) {
      r.failed.assign(static_cast<std::size_t>(n), false);
      r.left.assign(static_cast<std::size_t>(n), false);
      r.goodbye.assign(static_cast<std::size_t>(n), false);
      r.heard.assign(static_cast<std::size_t>(n), Clock::now());
    }
  }

  std::unique_ptr<cpu::EngineTransport> endpoint(int rank) {
    return std::make_unique<Endpoint>(this, rank);
  }
  // The bottom layer of a transport table: StackContext::rank's endpoint (no mesh needed).
  cpu::TransportLayer layer() {
    cpu::TransportLayer l;
    l.name = "memory_fabric";
    l.applies = [](const cpu::StackContext&) { return true; };
    l.prepare = [this](cpu::StackContext&) -> cpu::LayerBuild {
      return [this](std::unique_ptr<cpu::EngineTransport> below, cpu::StackContext& ctx) {
        (void)below;  // the bottom: nothing below
        return endpoint(ctx.rank);
      };
    };
    return l;
  }

  // ---- faults --------------------------------------------------------------------------
  void drop_link(int a, int b) {
    std::lock_guard lock(mu_);
    link(a, b).dropped = link(b, a).dropped = true;
    link(a, b).held.clear();
    link(b, a).held.clear();
  }
  void reset_link(int a, int b) {
    std::lock_guard lock(mu_);
    break_link(a, b, "connection reset by peer (injected)");
    break_link(b, a, "connection reset by peer (injected)");
    cv_.notify_all();
  }
  void crash(int r) {
    std::lock_guard lock(mu_);
    for (int p = 0; p < n_; ++p) {
      if (p != r) {
        break_link(
            r, p, "the connection was closed without the peer leaving the group: the process died");
        break_link(p, r, "connection reset (this rank crashed)");
      }
    }
    cv_.notify_all();
  }
  void hold(int from, int to) {
    std::lock_guard lock(mu_);
    link(from, to).holding = true;
  }
  void release(int from, int to) {
    std::lock_guard lock(mu_);
    Link& l = link(from, to);
    l.holding = false;
    for (auto& item : l.held) {
      ranks_[static_cast<std::size_t>(to)].inbox.push_back(std::move(item));
    }
    l.held.clear();
    match(from, to);
    cv_.notify_all();
  }
  void stall(int r) {
    std::lock_guard lock(mu_);
    ranks_[static_cast<std::size_t>(r)].stalled = true;
  }
  void unstall(int r) {
    std::lock_guard lock(mu_);
    ranks_[static_cast<std::size_t>(r)].stalled = false;
    for (int p = 0; p < n_; ++p) {
      for (Link* l : {&link(p, r), &link(r, p)}) {
        if (!l->holding) {
          const int to = l == &link(p, r) ? r : p;
          for (auto& item : l->held) {
            ranks_[static_cast<std::size_t>(to)].inbox.push_back(std::move(item));
          }
          l->held.clear();
        }
      }
      match(p, r);
      match(r, p);
    }
    cv_.notify_all();
  }
  void corrupt_next_header(int from, int to) {
    std::lock_guard lock(mu_);
    link(from, to).corrupt_next = true;
  }
  // News from a scripted rank: a control frame, or its link closing (with or without a
  // goodbye sent before, which decides "left" vs "died").
  void inject(int from, int to, cpu::FrameType type, std::vector<std::uint8_t> payload) {
    std::lock_guard lock(mu_);
    send_frame(from, to, type, 0, std::move(payload));
  }
  void inject_close(int from, int to, const std::string& why) {
    std::lock_guard lock(mu_);
    deliver(from, to, Item{Item::closed, from, cpu::FrameType::abort, 0, {}, why});
    cv_.notify_all();
  }

  // Control frames of one type that `from` sent to `to` (to check probes and notices).
  std::vector<std::vector<std::uint8_t>> sent(int from, int to, cpu::FrameType type) {
    std::lock_guard lock(mu_);
    std::vector<std::vector<std::uint8_t>> out;
    for (const auto& s : log_) {
      if (s.from == from && s.to == to && s.type == type) {
        out.push_back(s.payload);
      }
    }
    return out;
  }

 private:
  struct Item {
    enum Kind { frame, corrupt, broken, closed } kind;
    int from;
    cpu::FrameType type;
    std::uint32_t tag;
    std::vector<std::uint8_t> payload;
    std::string error;
  };
  struct Req {
    std::byte* data;
    std::size_t bytes;
    std::uint64_t token;
  };
  struct Link {  // from -> to
    std::deque<Req> sends;
    std::deque<Req> recvs;
    std::deque<Item> held;
    bool holding = false;
    bool dropped = false;
    bool broken = false;
    bool corrupt_next = false;
  };
  struct Posted {
    int peer;
    std::uint32_t tag;
    std::byte* data;
    std::size_t bytes;
    std::uint64_t token;
  };
  struct Unexpected {
    int peer;
    std::uint32_t tag;
    std::vector<std::uint8_t> bytes;
  };
  struct Rank {
    std::deque<Item> inbox;
    std::vector<std::uint64_t> completed;
    std::vector<cpu::TransportEvent> events;
    std::vector<Posted> posted;
    std::deque<Unexpected> unexpected;
    std::vector<bool> failed;              // peer_failed reported (or link reset by this rank)
    std::vector<bool> left;                // the peer closed after a goodbye
    std::vector<bool> goodbye;             // a goodbye arrived from the peer
    std::vector<Clock::time_point> heard;  // when something from the peer last arrived
    bool stalled = false;
    bool woken = false;
    bool closed = false;
  };
  struct Logged {
    int from;
    int to;
    cpu::FrameType type;
    std::vector<std::uint8_t> payload;
  };

  Link& link(int from, int to) { return links_[static_cast<std::size_t>(from * n_ + to)]; }
  Rank& rank(int r) { return ranks_[static_cast<std::size_t>(r)]; }

  bool flowing(int from, int to) {
    const Link& l = link(from, to);
    return !l.holding && !l.dropped && !l.broken && !rank(from).stalled && !rank(to).stalled &&
           !rank(from).closed && !rank(to).closed;
  }
  void deliver(int from, int to, Item item) {
    Link& l = link(from, to);
    if (l.dropped) {
      return;
    }
    if (l.holding || rank(to).stalled || rank(from).stalled) {
      l.held.push_back(std::move(item));
    } else {
      rank(to).inbox.push_back(std::move(item));
    }
  }
  void break_link(int from, int to, const std::string& why) {
    Link& l = link(from, to);
    if (l.broken || l.dropped) {
      return;
    }
    deliver(from, to, Item{Item::broken, from, cpu::FrameType::abort, 0, {}, why});
    l.broken = true;
    l.sends.clear();
    l.recvs.clear();
  }
  // Rendezvous of the collective stream from -> to.
  void match(int from, int to) {
    Link& l = link(from, to);
    while (flowing(from, to) && !l.sends.empty() && !l.recvs.empty()) {
      const Req s = l.sends.front();
      const Req r = l.recvs.front();
      l.sends.pop_front();
      l.recvs.pop_front();
      std::memcpy(r.data, s.data, std::min(s.bytes, r.bytes));
      rank(to).heard[static_cast<std::size_t>(from)] = Clock::now();
      rank(from).completed.push_back(s.token);
      rank(to).completed.push_back(r.token);
    }
    cv_.notify_all();
  }

  void peer_failed(int self, int peer, const std::string& why) {
    Rank& me = rank(self);
    if (me.failed[static_cast<std::size_t>(peer)]) {
      return;
    }
    me.failed[static_cast<std::size_t>(peer)] = true;
    cpu::TransportEvent ev;
    ev.kind = cpu::TransportEvent::Kind::peer_failed;
    ev.peer = peer;
    ev.error = why;
    ev.left = me.goodbye[static_cast<std::size_t>(peer)];
    me.events.push_back(std::move(ev));
    link(self, peer).sends.clear();
    link(peer, self).recvs.clear();
  }
  bool needs(int self, int peer) {
    Rank& me = rank(self);
    return !link(self, peer).sends.empty() || !link(peer, self).recvs.empty() ||
           std::any_of(me.posted.begin(), me.posted.end(),
                       [&](const Posted& p) { return p.peer == peer; });
  }
  void p2p_done(int self, int peer, std::uint64_t token, std::string error) {
    cpu::TransportEvent ev;
    ev.kind = cpu::TransportEvent::Kind::p2p_done;
    ev.peer = peer;
    ev.token = token;
    ev.error = std::move(error);
    rank(self).events.push_back(std::move(ev));
  }
  bool gone(int self, int peer) {
    return rank(self).failed[static_cast<std::size_t>(peer)] ||
           rank(self).left[static_cast<std::size_t>(peer)];
  }

  // Turns the inbox of `self` into events (engine thread of `self`, under the lock).
  void process(int self) {
    Rank& me = rank(self);
    while (!me.inbox.empty()) {
      Item item = std::move(me.inbox.front());
      me.inbox.pop_front();
      const int from = item.from;
      const auto up = static_cast<std::size_t>(from);
      if (me.failed[up]) {
        continue;
      }
      switch (item.kind) {
        case Item::corrupt:
          peer_failed(self, from,
                      "protocol error on the control connection (frame type 3735928559, 0 bytes)");
          break;
        case Item::broken:
          peer_failed(self, from, item.error);
          break;
        case Item::closed:
          if (me.goodbye[up]) {
            me.left[up] = true;
            if (needs(self, from)) {
              peer_failed(self, from,
                          "the connection was closed while this rank still expected data");
            }
          } else {
            peer_failed(self, from, item.error);
          }
          break;
        case Item::frame:
          me.heard[up] = Clock::now();
          if (item.type == cpu::FrameType::heartbeat) {
            break;  // only heard
          }
          if (item.type == cpu::FrameType::p2p) {
            auto it = std::find_if(me.posted.begin(), me.posted.end(), [&](const Posted& p) {
              return p.peer == from && p.tag == item.tag;
            });
            if (it == me.posted.end()) {
              me.unexpected.push_back({from, item.tag, std::move(item.payload)});
            } else {
              std::string error;
              if (it->bytes != item.payload.size()) {
                error = "size mismatch";
              } else if (it->bytes > 0) {
                std::memcpy(it->data, item.payload.data(), it->bytes);
              }
              const std::uint64_t token = it->token;
              me.posted.erase(it);
              p2p_done(self, from, token, std::move(error));
            }
            break;
          }
          if (item.type == cpu::FrameType::goodbye) {
            me.goodbye[up] = true;
          }
          cpu::TransportEvent ev;
          ev.kind = cpu::TransportEvent::Kind::control;
          ev.peer = from;
          ev.frame = item.type;
          ev.payload = std::move(item.payload);
          me.events.push_back(std::move(ev));
          break;
      }
    }
  }

  void send_frame(int self, int peer, cpu::FrameType type, std::uint32_t tag,
                  std::vector<std::uint8_t> payload) {
    log_.push_back({self, peer, type, payload});
    Link& l = link(self, peer);
    if (l.corrupt_next) {
      l.corrupt_next = false;
      deliver(self, peer, Item{Item::corrupt, self, type, tag, {}, {}});
    } else {
      deliver(self, peer, Item{Item::frame, self, type, tag, std::move(payload), {}});
    }
    cv_.notify_all();
  }

  class Endpoint final : public cpu::EngineTransport {
   public:
    Endpoint(MemoryFabric* f, int rank)
        : f_(f), rank_(rank), address_("mem:" + std::to_string(rank)) {
      for (int p = 0; p < f->n_; ++p) {
        addresses_.push_back("mem:" + std::to_string(p));
      }
    }
    ~Endpoint() override { close_all(); }

    void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override {
      post(rank_, peer, const_cast<void*>(data), bytes, token, true);
    }
    void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) override {
      post(peer, rank_, data, bytes, token, false);
    }
    void send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                  std::uint64_t token) override {
      std::lock_guard lock(f_->mu_);
      if (f_->gone(rank_, peer)) {
        f_->p2p_done(rank_, peer, token, "the connection to the peer is gone");
        return;
      }
      const auto* b = static_cast<const std::uint8_t*>(data);
      f_->send_frame(rank_, peer, cpu::FrameType::p2p, tag,
                     std::vector<std::uint8_t>(b, b + bytes));
      f_->p2p_done(rank_, peer, token, {});
    }
    void recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                  std::uint64_t token) override {
      std::lock_guard lock(f_->mu_);
      Rank& me = f_->rank(rank_);
      for (auto it = me.unexpected.begin(); it != me.unexpected.end(); ++it) {
        if (it->peer == peer && it->tag == tag) {
          std::string error;
          if (it->bytes.size() != bytes) {
            error = "size mismatch";
          } else if (bytes > 0) {
            std::memcpy(data, it->bytes.data(), bytes);
          }
          me.unexpected.erase(it);
          f_->p2p_done(rank_, peer, token, std::move(error));
          return;
        }
      }
      if (f_->gone(rank_, peer)) {
        f_->p2p_done(rank_, peer, token, "the connection to the peer is gone");
        return;
      }
      me.posted.push_back({peer, tag, static_cast<std::byte*>(data), bytes, token});
    }
    void send_control(int peer, cpu::FrameType type, std::vector<std::uint8_t> payload) override {
      std::lock_guard lock(f_->mu_);
      if (!f_->gone(rank_, peer)) {
        f_->send_frame(rank_, peer, type, 0, std::move(payload));
      }
    }
    void poll(Deadline until, std::vector<std::uint64_t>& completed,
              std::vector<cpu::TransportEvent>& events) override {
      std::unique_lock lock(f_->mu_);
      Rank& me = f_->rank(rank_);
      auto ready = [&] {
        if (!me.stalled) {
          f_->process(rank_);
        }
        return me.woken || (!me.stalled && (!me.completed.empty() || !me.events.empty()));
      };
      if (until.is_never()) {
        f_->cv_.wait(lock, ready);
      } else {
        f_->cv_.wait_until(lock, until.when(), ready);
      }
      me.woken = false;
      if (me.stalled) {
        return;
      }
      completed.insert(completed.end(), me.completed.begin(), me.completed.end());
      me.completed.clear();
      std::move(me.events.begin(), me.events.end(), std::back_inserter(events));
      me.events.clear();
    }
    void wakeup() noexcept override {
      std::lock_guard lock(f_->mu_);
      f_->rank(rank_).woken = true;
      f_->cv_.notify_all();
    }
    void drop_all() noexcept override {
      std::lock_guard lock(f_->mu_);
      Rank& me = f_->rank(rank_);
      for (int p = 0; p < f_->n_; ++p) {
        f_->link(rank_, p).sends.clear();
        f_->link(p, rank_).recvs.clear();
      }
      me.posted.clear();
      me.completed.clear();
      me.events.erase(std::remove_if(me.events.begin(), me.events.end(),
                                     [](const cpu::TransportEvent& e) {
                                       return e.kind == cpu::TransportEvent::Kind::p2p_done;
                                     }),
                      me.events.end());
    }
    void flush_control(Deadline) override {}  // frames are delivered when sent
    void close_all() noexcept override {
      std::lock_guard lock(f_->mu_);
      Rank& me = f_->rank(rank_);
      if (me.closed) {
        return;
      }
      for (int p = 0; p < f_->n_; ++p) {
        if (p != rank_ && !f_->link(rank_, p).broken) {
          f_->deliver(rank_, p,
                      Item{Item::closed,
                           rank_,
                           cpu::FrameType::abort,
                           0,
                           {},
                           "the connection was closed without the peer leaving the group"});
        }
      }
      me.closed = true;
      f_->cv_.notify_all();
    }
    void sever(int peer) noexcept override {
      std::lock_guard lock(f_->mu_);
      f_->rank(rank_).failed[static_cast<std::size_t>(peer)] = true;
      f_->break_link(rank_, peer, "the connection was closed without the peer leaving the group");
      f_->link(peer, rank_).broken = true;
      f_->cv_.notify_all();
    }
    bool peer_connected(int peer) const override {
      std::lock_guard lock(f_->mu_);
      return !f_->gone(rank_, peer);
    }
    std::optional<Clock::time_point> last_heard(int peer) const override {
      std::lock_guard lock(f_->mu_);
      if (f_->gone(rank_, peer) || f_->rank(rank_).goodbye[static_cast<std::size_t>(peer)]) {
        return std::nullopt;
      }
      return f_->rank(rank_).heard[static_cast<std::size_t>(peer)];
    }
    const std::string& address(int peer) const override {
      return addresses_[static_cast<std::size_t>(peer)];
    }
    const std::string& local_address() const override { return address_; }

   private:
    void post(int from, int to, void* data, std::size_t bytes, std::uint64_t token, bool send) {
      std::lock_guard lock(f_->mu_);
      const int peer = send ? to : from;
      Rank& me = f_->rank(rank_);
      if (me.failed[static_cast<std::size_t>(peer)]) {
        return;  // the engine already heard about it
      }
      Link& l = f_->link(from, to);
      if (l.broken) {
        return;  // its failure is on the way
      }
      (send ? l.sends : l.recvs).push_back({static_cast<std::byte*>(data), bytes, token});
      if (me.left[static_cast<std::size_t>(peer)]) {
        f_->peer_failed(rank_, peer,
                        "the connection was closed while this rank still expected data");
        return;
      }
      f_->match(from, to);
    }

    MemoryFabric* f_;
    int rank_;
    std::string address_;
    std::vector<std::string> addresses_;
  };

  int n_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Link> links_;
  std::vector<Rank> ranks_;
  std::vector<Logged> log_;
};

}  // namespace chorus::test
