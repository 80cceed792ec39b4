// SPDX-License-Identifier: BSD-3-Clause
// Shared memory between the ranks of a group that run on one host: one segment per host and
// group, holding a byte ring for every ordered pair of those ranks and a wake word per rank
// (shm_transport.hpp moves the collective streams through them), and the small-op board
// (slot_board.hpp; used when the group's ranks all run on this host).
//
// The segment has a name in /dev/shm only while it is set up: the host's lowest rank creates
// it (O_EXCL, mode 0600, a random name, its pages reserved up front so that a full /dev/shm is
// an error here and never a SIGBUS later), sends the name to the others over their verified
// control sockets, and unlinks it as soon as all of them have mapped it. From then on it lives
// only in the ranks' mappings, and the kernel frees it when the last of them exits, SIGKILL
// included.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/transports/socket/mesh.hpp"

namespace chorus::cpu {

// A rank sleeping in the shared-memory transport waits on `seq` (a futex) after setting
// `sleeping`; whoever makes progress possible for it bumps `seq` and wakes it.
struct alignas(64) WakeWord {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> sleeping{0};
};

// After making progress possible for the rank of `w` (moving a ring it waits on, publishing on
// the board): wakes it if it sleeps. Pairs with the fence in ShmTransport::sleep(): either the
// sleeper sees the change, or this sees it asleep.
void wake_if_sleeping(WakeWord& w) noexcept;

// One direction of one pair: a single-producer single-consumer byte ring. `head` counts the
// bytes ever written (producer), `tail` the bytes ever read (consumer); each on its own cache
// line so that the two sides never write the same line.
struct RingIndex {
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};
};

class ShmSegment {
 public:
  // Maps nothing: takes over a mapping of `bytes` at `base` laid out for `locals` ranks.
  ShmSegment(void* base, std::size_t bytes, int locals, std::size_t ring_bytes) noexcept;
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The bytes a segment for `locals` ranks with rings of `ring_bytes` takes, with the small-op
  // board after the rings if `board`.
  static std::size_t size_for(int locals, std::size_t ring_bytes, bool board) noexcept;

  // `local` indices are positions in the host's sorted list of ranks.
  WakeWord& wake(int local) const noexcept;
  RingIndex& ring(int from, int to) const noexcept;
  std::byte* ring_data(int from, int to) const noexcept;
  // The small-op board of these ranks (slot_board.hpp): SlotBoard::bytes_for(locals) bytes;
  // only in a segment laid out with one (attach_host_segment with `whole_group`).
  std::byte* board() const noexcept;
  std::size_t ring_bytes() const noexcept { return ring_bytes_; }
  int locals() const noexcept { return locals_; }
  // Whether these ranks reach each other's memory (peer_memory.hpp): every follower and the
  // host's lowest rank read each other's probe word at setup. If not, why not.
  bool peer_memory() const noexcept { return peer_memory_why_not_.empty(); }
  const std::string& peer_memory_why_not() const noexcept { return peer_memory_why_not_; }
  void set_peer_memory_why_not(std::string why) { peer_memory_why_not_ = std::move(why); }

 private:
  std::size_t pair_index(int from, int to) const noexcept;

  std::byte* base_;
  std::size_t bytes_;
  int locals_;
  std::size_t ring_bytes_;
  std::string peer_memory_why_not_ = "not tested (the group spans hosts)";
};

// Ring size per direction and pair: large enough that a sender rarely waits for its reader,
// small enough that a host's rings stay in the last-level cache for a few ranks.
std::size_t default_ring_bytes(int locals) noexcept;

// Collective over the ranks in `locals` (sorted group ranks on this host, `rank` among them),
// run right after the mesh is built and before its sockets are handed to the transport. Returns
// the mapped segment, or nullptr with the reason in `why_not` when it cannot be set up on some
// rank (no /dev/shm, out of space): every rank of the host then agrees on the same answer.
// Throws NetworkError/TimeoutError naming the rank if a control socket fails meanwhile.
// `whole_group` (every rank of the group is on this host; the same on every rank of the host):
// also run the peer memory probe (ShmSegment::peer_memory(); false without it) and lay out
// the small-op board, the two things only such a group uses.
std::unique_ptr<ShmSegment> attach_host_segment(Mesh& mesh, int rank,
                                                const std::vector<int>& locals, Deadline deadline,
                                                bool whole_group, std::string& why_not);

}  // namespace chorus::cpu
