// SPDX-License-Identifier: BSD-3-Clause
// ShmTransport: the collective streams between ranks on one host go through the host's shared
// segment (shm_segment.hpp) instead of loopback sockets; everything else (streams to other
// hosts, tagged send/recv, control frames, heartbeats, failure events) stays with the inner
// socket transport. So a peer that dies still resets its sockets and is named at once, and
// one that stops still falls silent on its control socket: the failure contract is the
// socket transport's.
//
// Each ordered pair of host ranks has a byte ring; a message is copied into it in chunks of
// kChunkBytes (the reader starts on the first chunk while the writer copies the next, and a
// chunk stays in cache between the two copies). Every message starts on a kMessageAlign
// boundary of the ring (both ends skip the same padding), so a receive that is reduced as it
// arrives (post_recv_reduce) reads whole, aligned elements straight out of the ring, never
// one cut by the ring's end, and saves the copy into a staging slot. A rank with nothing to move
// sleeps on its wake word, a futex in the segment that a peer bumps when it writes into or reads
// from a ring the sleeper waits on (only while one sleeps: no system call otherwise). While asleep
// it looks at its sockets every kSocketSlice. While the engine runs a collective of up to
// Engine::kSpinMaxBytes, it first keeps looking for up to the engine's spin budget after the
// last byte moved, yielding between looks: a futex wake-up costs tens of microseconds on a VM,
// and every step of a ring would wait for one (docs/results.md, "Shared memory: reducing out of
// the rings, looking before sleeping").
//
// When every rank of the group is on this host it also offers the SmallOps capability
// (small_ops()): its small-op board (slot_board.hpp), in the same segment.
//
// Progress thread only, except wakeup() and the board (see slot_board.hpp for its threads).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "cpu/transports/forwarding_transport.hpp"
#include "cpu/transports/shm/shm_segment.hpp"
#include "cpu/transports/shm/slot_board.hpp"

namespace chorus::cpu {

class ShmTransport final : public ForwardingTransport {
 public:
  static constexpr std::size_t kChunkBytes = 64 * 1024;
  // A cache line: a multiple of every element size, and a divisor of the ring sizes.
  static constexpr std::size_t kMessageAlign = 64;
  static constexpr Duration kSocketSlice = std::chrono::milliseconds(1);

  // `locals`: the sorted group ranks of this host (this rank among them), as the segment
  // was laid out for; `size`: the group's. `board`: offer the segment's small-op board (every
  // rank of the group is on this host, and the segment was laid out with a board).
  ShmTransport(int rank, int size, std::vector<int> locals, std::shared_ptr<ShmSegment> segment,
               std::unique_ptr<EngineTransport> inner, bool board);

  void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override;
  void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) override;
  // Same-host peers: reduces each chunk straight out of the ring. Peers on other hosts: the
  // socket transport's answer (it cannot).
  bool post_recv_reduce(int peer, const ReduceOnArrival& r, std::uint64_t token) override;
  void poll(Deadline until, std::vector<std::uint64_t>& completed,
            std::vector<TransportEvent>& events) override;
  void wakeup() noexcept override;
  void drop_all() noexcept override;
  void sever(int peer) noexcept override;
  // The rings are looked at for up to hint.spin after the last byte moved, before the futex
  // sleep; the sockets only where they carry collective data (ranks on other hosts): spinning
  // on sockets that carry nothing but control frames would only take the core from the peers.
  // While the engine waits on the board (hint.small_op), polls sleep on the wake word, which
  // board publishes bump, not in the socket transport's poll.
  void before_poll(const PollHint& hint) noexcept override {
    awaiting_board_ = hint.small_op;
    spin_ = hint.spin;
    PollHint below = hint;
    below.spin = other_hosts_ ? hint.spin : std::chrono::microseconds::zero();
    inner_->before_poll(below);
  }
  // The board, when this group has one; else what the layer below offers.
  SmallOps* small_ops() noexcept override {
    return board_ ? static_cast<SmallOps*>(board_.get()) : inner_->small_ops();
  }

 private:
  struct Message {
    std::byte* data;
    std::size_t bytes;
    std::size_t done = 0;
    std::uint64_t token;
    // A receive reduced on arrival: data is the output; `reduce` says with what.
    std::optional<ReduceOnArrival> reduce;
    std::size_t unit = 1;  // bytes a pull moves at a time: the element size when reducing
  };
  // This rank's two rings with one host peer.
  struct Link {
    int local = -1;  // the peer's index in locals
    int rank = -1;   // the peer's group rank
    RingIndex* out = nullptr;
    std::byte* out_data = nullptr;
    RingIndex* in = nullptr;
    std::byte* in_data = nullptr;
    std::deque<Message> sends;
    std::deque<Message> recvs;
    bool dropped = false;   // sever(): transfers are forgotten
    bool left = false;      // the peer said goodbye: nothing more will come from it
    bool reported = false;  // its departure was reported as a failure
  };

  Link* link_of(int peer) noexcept;
  bool pending() const noexcept;
  // Moves what the rings allow; true if any byte moved or a message completed.
  bool progress(std::vector<std::uint64_t>& completed);
  bool push(Link& link, std::vector<std::uint64_t>& completed);
  bool pull(Link& link, std::vector<std::uint64_t>& completed);
  bool can_move(const Link& link) const noexcept;
  // Where the front message of a ring starts or continues (past the padding before a new
  // message), and how many of its bytes can be written / read there now.
  struct Window {
    std::uint64_t at;
    std::size_t bytes;
  };
  Window writable(const Link& link) const noexcept;
  Window readable(const Link& link) const noexcept;
  // Reduces `bytes` of the message at ring offset `ring_at` into its output.
  void reduce_from_ring(Message& m, const std::byte* ring_at, std::size_t bytes) const;
  // Peers that left the group (a goodbye on the control channel) while this rank still had
  // transfers with them: reported as the socket transport reports a data stream that closes
  // under a pending transfer.
  void watch_departures(std::vector<TransportEvent>& events);
  // A peer's death (its sockets reset or closed) is seen after everything it wrote to its ring
  // before dying: its failure waits while a posted receive from it can still read there, so
  // an op it finished its part of completes here too. (Over sockets the kernel delivers a dead
  // peer's last bytes before the close; a ring has no such order with the sockets.)
  void hold_while_readable(std::vector<TransportEvent>& events);
  void notify(int local) noexcept;
  // Sleeps on this rank's wake word until a peer moves a ring or `until` (at most
  // kSocketSlice); returns at once if progress became possible meanwhile.
  void sleep(Deadline until, std::vector<std::uint64_t>& completed);

  int local_ = -1;
  bool other_hosts_ = false;             // some ranks of the group are not on this host
  std::shared_ptr<ShmSegment> segment_;  // shared with board_, if any
  std::unique_ptr<SlotBoard> board_;     // the small-op board (every rank on this host)
  std::vector<int> link_index_;          // by group rank: index in links_, or -1 (other host)
  std::vector<Link> links_;
  std::vector<TransportEvent> held_failures_;  // hold_while_readable()
  // The engine waits on the board (PollHint::small_op): sleep on the wake word (which board
  // publishes bump), not in the socket transport's poll.
  bool awaiting_board_ = false;
  std::chrono::microseconds spin_{0};  // PollHint::spin
  Clock::time_point last_moved_{};     // when progress() last moved a byte (while spin_ > 0)
};

}  // namespace chorus::cpu
