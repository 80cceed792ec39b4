// SPDX-License-Identifier: BSD-3-Clause
// SlotBoard: the small-op path of a group whose ranks all run on one host and share a segment
// (shm_segment.hpp): ShmTransport offers it as its SmallOps capability (small_ops.hpp), which
// the engine drives without knowing it is a board in shared memory. A small allreduce does not go
// through the rings: each rank copies its input into its own slot in the segment, and every rank
// reduces all the slots, in rank order, into its output, so every rank gets the same bits. No
// thread hand-off, no stream headers, no system call when the peers are on time: an 8-byte
// allreduce costs a copy and a few cache-line reads. A rank whose peers are late spins briefly (not
// at all when the ranks outnumber the CPUs), yields, then sleeps on its wake word (a futex the
// publishers bump), so waiting ranks give the CPU to the late ones.
//
// Who runs a board op: the caller's thread when the engine has no collective queued or
// running (Engine::run_small_op: the usual case for a small blocking op), else the engine
// thread when the op's turn comes. Both run the same steps on the same slots, so ranks may differ
// in which thread runs an op.
//
// Slots are double-buffered: a group's k-th board op uses buffer k % 2. A rank is at most one
// board op ahead of any other (it cannot finish op k before every rank has published k), so
// it never overwrites a buffer a peer still reads.
//
// Every collective off the board announces (seq, signature) in the rank's `current` line when
// it starts; a board op's slot header is its announcement. A rank waiting on the board that
// finds a peer at its seq with another op fails at once with a mismatch, as the stream headers
// would have.
//
// One thread at a time per rank (the op's runner), which may be a different thread from op to op
// (the caller's or the engine's, handed over under the group's locks); wait() and spins() settle
// the spin decision in plain members, so they too belong to the runner.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/types.hpp>

#include "core/signature.hpp"
#include "cpu/transports/small_ops.hpp"

namespace chorus::cpu {

class ShmSegment;
struct WakeWord;

class SlotBoard final : public SmallOps {
 public:
  // Payload per rank and buffer: the largest allreduce the board takes.
  static constexpr std::size_t kSlotBytes = 64 * 1024;

  // Bytes of segment the board of `ranks` ranks takes (64-byte aligned).
  static std::size_t bytes_for(int ranks) noexcept;

  // The board in `segment` (ShmSegment::board(), laid out for `size` ranks; this rank is
  // `rank`): the board keeps the segment mapped.
  SlotBoard(std::shared_ptr<ShmSegment> segment, int rank, int size) noexcept;
  ~SlotBoard() = default;
  SlotBoard(const SlotBoard&) = delete;
  SlotBoard& operator=(const SlotBoard&) = delete;

  // Whether an allreduce of `bytes` goes through the board (the same answer on every rank).
  static bool takes(std::size_t bytes) noexcept { return bytes > 0 && bytes <= kSlotBytes; }

  // SmallOps (small_ops.hpp):
  const char* name() const noexcept override { return "board"; }
  // Allreduces of 1 byte to kSlotBytes.
  bool takes(const OpSignature& sig, std::size_t bytes) const noexcept override {
    return sig.kind == OpType::allreduce && takes(bytes);
  }
  std::size_t max_bytes() const noexcept override { return kSlotBytes; }

  // Any collective off the board, when it starts on this rank.
  void announce(const OpSignature& sig) noexcept override;

  // A board op: publishes this rank's input (`bytes` <= kSlotBytes) with the op's signature.
  // Then the caller calls wake_peers(), at once or after a first look with ready(): the wake
  // waits for the publish to reach the peers, and that look overlaps with that wait.
  void publish(const OpSignature& sig, const void* in, std::size_t bytes) noexcept override;
  // Wakes the peers that sleep waiting on the board (for a publish of this rank's).
  void wake_peers() noexcept override;

  // Whether every rank has published the op `sig` (published by this rank); a peer found
  // running another op at this op's seq (or already past it) is a mismatch.
  bool ready(const OpSignature& sig, std::optional<Mismatch>& mismatch) const noexcept override;
  // Once ready(): out = the reduction of every rank's input, in rank order; ends the op.
  void finish(void* out, std::size_t count, DataType dtype, ReduceOp op) noexcept override;
  // The ranks that have not published the op with this seq yet, with the latest seq each
  // announced or published (for timeout messages).
  std::vector<std::pair<int, std::uint64_t>> missing(std::uint64_t seq) const noexcept override;

  // What the ranks have published and announced so far, for wait(): taken before a look with
  // ready(), so that a publish landing between that look and the wait ends the wait at once.
  std::uint64_t snapshot() const noexcept override;
  // Blocks until the board differs from `seen` (a snapshot()) or `until`: spins for a few
  // microseconds (unless the host is oversubscribed), yields, then sleeps on this rank's wake
  // word (at most a millisecond at a time). Whether the board changed: when it did not, the
  // caller looks at its deadline (a clock read the spin spares the usual case).
  bool wait(std::uint64_t seen, Deadline until) noexcept override;

  // Whether wait() spins before it yields: when the union of the ranks' affinity masks (each
  // rank writes its own when it makes its board) has at least as many CPUs as there are ranks.
  // Ranks bound to a core each spin; ranks that share fewer cores than they are yield at once.
  // A mask changed after the board was made is not seen.
  bool spins() const noexcept;

 private:
  struct Line;
  struct CpuMask;
  Line& current(int rank) const noexcept;
  CpuMask& mask(int rank) const noexcept;
  Line& header(int rank, int buffer) const noexcept;
  // Where a payload of `bytes` starts in that slot (small ones share the header's line).
  std::byte* data(int rank, int buffer, std::size_t bytes) const noexcept;
  WakeWord& wake(int rank) const noexcept;  // the board's, not the segment's

  std::shared_ptr<ShmSegment> segment_;
  std::byte* area_;
  int rank_;
  int size_;
  // wait()'s busy looks before it yields: none when the host's ranks outnumber the CPUs they
  // may run on together (a waiting rank then holds the core the late rank needs). Settled by
  // spins() once every rank's mask is on the board; until then from this rank's mask alone.
  mutable int spins_ = 0;
  mutable bool spins_settled_ = false;
  std::uint64_t rounds_ = 0;  // board ops finished by this rank
  // The signature of the op this rank published last, as written to its slot (ready() compares
  // the peers' slots with it byte for byte before it decodes anything).
  EncodedSignature published_{};
};

}  // namespace chorus::cpu
