// SPDX-License-Identifier: BSD-3-Clause
// Schedule: one collective as a dependency graph of sends, receives, one-sided reads and
// writes, copies and reductions, plus the scratch memory it uses. Algorithms build schedules; an
// Executor runs them.
//
// Why a graph: pipelining falls out of it. A ring step's send of slice j depends only on the
// reduction of slice j, so send, receive and reduce of different slices overlap without each
// algorithm writing its own state machine. Per peer and direction, transfers are posted in
// the order they were added (FIFO), which is what makes the two ends of a stream agree.
//
// finalize() adds the op's signature header as the first message in both directions with
// every peer the op talks to, so a rank running a different op at the same sequence number
// is caught at its first message.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/types.hpp>

#include "core/signature.hpp"
#include "cpu/plan/one_sided.hpp"

namespace chorus::cpu {

using TaskId = std::int32_t;
inline constexpr TaskId kNoTask = -1;

// Every op's bytes on a data stream (each direction of each peer pair) start and end on a
// 64-byte boundary of the stream. Why: the kernel copies a socket's bytes into and out of pages
// at their offset in the stream (the sending thread's page fragments fill contiguously), and on
// this VM's AMD cores `rep movsb` between a source and a destination that are not equally
// aligned within a cache line runs 15-45 % slower; with the stream aligned, a 64-byte aligned
// user buffer (torch's, aligned_alloc's) is copied aligned both ways. So an op's signature
// header is zero-padded to 64 bytes, and a stream whose data is not a multiple of 64 bytes is
// padded with zeros: by a pad message at its end (its data stays aligned), or, under
// kPadMessageMinBytes of data, by a longer header (no extra message for a small op).
inline constexpr std::size_t kStreamAlign = 64;
inline constexpr std::size_t kPadMessageMinBytes = 4096;
static_assert(kStreamAlign >= kSignatureBytes);
// Bytes an op may carry inside its headers after the signature (Schedule::carry_in_header()):
// a multiple of kStreamAlign, so that such a header ends aligned.
inline constexpr std::size_t kHeaderPayloadMaxBytes = 2 * kStreamAlign;
// The longest header: a signature padded to 64 bytes, plus up to 63 bytes of a small op's pad or
// a payload (carry_in_header()).
using WireHeader = std::array<std::uint8_t, kStreamAlign + kHeaderPayloadMaxBytes>;
using WirePad = std::array<std::uint8_t, kStreamAlign>;

// How one op frames `data_bytes` on a stream: the header's length (signature and zeros) and the
// pad message's (0: none), so that the total is a multiple of kStreamAlign.
struct StreamFraming {
  std::size_t header_bytes = kStreamAlign;
  std::size_t pad_bytes = 0;
};
StreamFraming stream_framing(std::size_t data_bytes) noexcept;

// recv_reduce: a receive reduced as it arrives (Transport::post_recv_reduce); in the receive
// FIFO like recv. round: data = its values after a trip over the op's wire (round_to_wire()).
// read, write: one-sided transfers of a peer's registered memory (one_sided.hpp), which the
// executor posts and completes by token, in any order: no stream, no FIFO, only dependencies.
enum class TaskKind : std::uint8_t {
  send,
  recv,
  recv_reduce,
  copy,
  reduce,
  call,
  round,
  read,
  write
};

// Local work that can fail because of a peer (a call task reading another rank's memory): what
// went wrong, naming the peer by group rank. The op then fails as if that peer's link broke.
struct LocalFailure {
  int peer = -1;
  std::string what;
};
using LocalWork = std::function<std::optional<LocalFailure>()>;

struct Task {
  TaskKind kind = TaskKind::copy;
  bool header = false;  // a signature header (send or receive-and-verify)
  bool pad = false;     // zeros that end an op's stream on a kStreamAlign boundary
  int peer = -1;        // send/recv, read/write
  void* dst = nullptr;
  const void* src = nullptr;
  const void* src2 = nullptr;  // reduce: dst = src op src2; recv_reduce: the staging slot
  std::size_t size =
      0;  // send/recv/copy/read/write: bytes; reduce, recv_reduce: elements; call: its index
  int divisor = 0;          // reduce with avg: divide the result by this (0: don't)
  bool local_first = true;  // recv_reduce: dst = src op received (false: received op src)
  // send, recv, recv_reduce: the data travels in the op's wire type (Schedule::wire_to()): a
  // send narrows it into a staging slot as it is posted, a receive takes the narrow elements
  // (recv: into the end of dst, widened in place; recv_reduce: into its slot) and widens them.
  bool wire = false;
  std::uint8_t staging = 0;  // a wire send's staging slot (the executor's)
  // read, write: the peer's memory (its key, read when the task is posted) and the byte offset
  // into it; dst (read) or src (write) is this rank's side.
  const MemoryKey* key = nullptr;
  std::size_t offset = 0;
  std::uint32_t deps = 0;  // unfinished predecessors (the executor counts down)
  std::uint32_t succ_begin = 0;
  std::uint32_t succ_count = 0;
};

// Scratch memory reused across the ops of one group (the progress thread only). Allocations
// are 64-byte aligned and stay valid until reset(). Memory is sized to what the ops ask for
// (no minimum block), so algorithms must ask for what the op needs, not for a slice size.
class ScratchArena {
 public:
  void* alloc(std::size_t bytes);
  void reset() noexcept;
  // Bytes held (all blocks), for tests that check scratch is sized to the op.
  std::size_t capacity() const noexcept;

 private:
  static constexpr std::size_t kAlign = 64;
  // Blocks come from the aligned operator new[], so they must go back through the aligned
  // operator delete[] (plain delete[] on them is undefined behaviour).
  struct AlignedDelete {
    void operator()(std::byte* p) const noexcept {
      ::operator delete[](p, std::align_val_t{kAlign});
    }
  };
  struct Block {
    std::unique_ptr<std::byte[], AlignedDelete> data;
    std::size_t size = 0;
  };
  std::vector<Block> blocks_;
  std::size_t block_ = 0;  // current block
  std::size_t used_ = 0;   // bytes used in it
};

class Schedule {
 public:
  Schedule(int rank, int size, DataType dtype, ReduceOp op, ScratchArena& arena);
  // Empties the schedule for another op of the same group and rank, keeping its vectors'
  // memory: a small op then builds without touching the heap.
  void clear(DataType dtype, ReduceOp op);

  // This rank and the group size, as the current view sees them (see enter_view()).
  int rank() const noexcept { return members_.empty() ? rank_ : view_rank_; }
  int size() const noexcept { return members_.empty() ? size_ : static_cast<int>(members_.size()); }
  DataType dtype() const noexcept { return dtype_; }
  ReduceOp op() const noexcept { return op_; }

  // Each returns the new task, or kNoTask when there is nothing to do (zero bytes). Entries
  // of `deps` equal to kNoTask are ignored. Deps must be tasks added earlier.
  TaskId send(int peer, const void* data, std::size_t bytes,
              std::initializer_list<TaskId> deps = {});
  TaskId recv(int peer, void* data, std::size_t bytes, std::initializer_list<TaskId> deps = {});
  TaskId copy(void* dst, const void* src, std::size_t bytes,
              std::initializer_list<TaskId> deps = {});
  // dst = a op b over `count` elements of the schedule's dtype; divisor as in core/reduce.hpp.
  TaskId reduce(void* dst, const void* a, const void* b, std::size_t count, int divisor,
                std::initializer_list<TaskId> deps = {});
  // dst = local op (count elements received from `peer`) when local_first, else received op
  // local; divisor as in reduce(). Where the transport can, the message is reduced as it
  // arrives (Transport::post_recv_reduce); elsewhere it is received into `slot` (count
  // elements of scratch, which the caller keeps free until this task completes) and reduced
  // then. In the receive FIFO like recv(); the sender sends count elements.
  TaskId recv_reduce(int peer, void* dst, const void* local, void* slot, std::size_t count,
                     int divisor, bool local_first, std::initializer_list<TaskId> deps = {});
  // ---- the wire between hosts (core/wire.hpp) ----
  // The op's wire type (unset: full precision) and the group's host of each rank (nullptr: one
  // host). Set for every op before its algorithm is built.
  void set_wire(std::optional<DataType> wire, const std::vector<int>* host_of);
  // While an AllowWire lives, the transfers added to peers on other hosts travel in the wire
  // type. Algorithms opt in: only those whose ranks end with the same bits when every transfer
  // rounds (ring and halving-doubling allreduce, which round_to_wire() their own block, and the
  // reductions whose result lives on one rank) take one.
  class AllowWire {
   public:
    explicit AllowWire(Schedule& s) : s_(s), before_(s.wire_allowed_) { s.wire_allowed_ = true; }
    ~AllowWire() { s_.wire_allowed_ = before_; }
    AllowWire(const AllowWire&) = delete;
    AllowWire& operator=(const AllowWire&) = delete;

   private:
    Schedule& s_;
    bool before_;
  };
  // Whether transfers to `peer` (as the current view names it) added now travel in the wire.
  bool wire_to(int peer) const;
  // Whether any transfer of this op may (the group spans hosts and the op has a wire).
  bool wire_active() const noexcept { return wire_allowed_ && wire_ && multi_host_; }
  DataType wire_dtype() const noexcept { return wire_.value_or(dtype_); }
  // A task that rounds `count` elements at `data` to what the wire carries, once `dep` is done;
  // `dep` itself where no transfer of the op uses the wire. An allreduce rounds each block its
  // rank finished before sending it on, so that the rank keeps what every peer receives.
  TaskId round_to_wire(void* data, std::size_t count, TaskId dep);
  // Bytes of the staging slots of wire sends to `peer` (0: none), and where they are; a send
  // takes slot k = its turn % kWireStagingSlots.
  static constexpr std::size_t kWireStagingSlots = 4;
  std::size_t staging_slot_bytes(int peer) const {
    return staging_[static_cast<std::size_t>(peer)].slot_bytes;
  }
  std::byte* staging_slot(int peer, std::size_t k) const {
    const Staging& st = staging_[static_cast<std::size_t>(peer)];
    return st.base + k * st.slot_bytes;
  }
  // Bytes a transfer task moves on its stream (a wire transfer: its message, core/wire.hpp).
  std::size_t wire_bytes(const Task& t) const noexcept;

  // One-sided transfers (one_sided.hpp): copies `bytes` at byte `offset` of the memory `key`
  // names (registered by `peer`) to `dst`, or from `src` to there. The executor posts them
  // through the transport's one-sided capability and completes them by token, possibly later
  // and in any order: their order is only what `deps` say. `*key` is read when the task is
  // posted (it may be received by an earlier task) and must stay valid until then.
  TaskId read(int peer, const MemoryKey* key, std::size_t offset, void* dst, std::size_t bytes,
              std::initializer_list<TaskId> deps = {});
  TaskId write(int peer, const MemoryKey* key, std::size_t offset, const void* src,
               std::size_t bytes, std::initializer_list<TaskId> deps = {});

  // Runs `work` on the progress thread once `deps` are done (local work an algorithm does
  // itself, e.g. through peers' memory mapped here: OneSided::map).
  TaskId call(LocalWork work, std::initializer_list<TaskId> deps = {});
  void depend(TaskId later, TaskId earlier);

  // Phases of a hierarchical algorithm run the ordinary builders on a sub-group: until
  // leave_view(), rank() and size() are positions in `members` (sorted group ranks, this rank
  // among them), every peer argument is a position in it, and a task added with no other
  // dependency waits for `gate` (kNoTask: none).
  void enter_view(std::vector<int> members, TaskId gate);
  void leave_view() noexcept;
  // A task that completes once every task added so far has (the end of a phase); kNoTask if
  // there is none.
  TaskId join_all();
  // A task that completes once every task in [from, to) has (one phase of a pipelined
  // algorithm); kNoTask if the range is empty.
  TaskId join_range(TaskId from, TaskId to);
  // The id the next task will get (a mark for join_range()).
  TaskId next_id() const noexcept { return static_cast<TaskId>(tasks_.size()); }

  // Transfers queued so far to / from `peer` (a mark for interleave()).
  std::size_t sends_to(int peer) const {
    return send_fifo_[static_cast<std::size_t>(group_rank(peer))].size();
  }
  std::size_t recvs_from(int peer) const {
    return recv_fifo_[static_cast<std::size_t>(group_rank(peer))].size();
  }
  // Reorders the FIFO of `peer` (sends or receives): the transfers added after position
  // `split` (phase B) are merged into those before it (phase A) so that B[i] is posted right
  // after A[i + lag]; the rest of B follows A. Only the posting order changes, never a
  // dependency. Both ends of a stream must apply the same rule to matching sequences (a
  // sender's send FIFO and its receiver's recv FIFO), and B[i] must depend only on transfers
  // that come before A[i + lag], or the two ends could wait on each other.
  void interleave(int peer, bool sends, std::size_t split, std::size_t lag);

  // Scratch for this op (valid until the op ends).
  void* scratch(std::size_t bytes) { return arena_.alloc(bytes); }

  // Adds the signature headers and freezes the graph.
  void finalize(const OpSignature& sig);

  // ---- ops built in two phases ----
  // The rest of the op, built once every task added so far has completed: the engine then
  // empties the schedule (its scratch stays valid), calls `next` on it, freezes the result with
  // finalize_continuation() and runs it as the same op. For choices that depend on what the
  // first phase exchanged (algorithms/direct.cpp, build_memory_agreement).
  using Continuation = std::function<void(Schedule&)>;
  void then(Continuation next) { next_ = std::move(next); }
  Continuation take_continuation() noexcept { return std::exchange(next_, nullptr); }
  // Freezes a continuation: as finalize(), without headers (the first phase checked them).
  void finalize_continuation(const OpSignature& sig);

  // The algorithm this build runs, for the flight recorder (a static name): the first one set
  // since clear() stays (a hierarchical algorithm's phases do not rename the op). An op built in
  // two phases names its first phase ("memory_agreement") and then its continuation's choice.
  void set_algorithm(const char* name) noexcept {
    if (algorithm_ == nullptr) {
      algorithm_ = name;
    }
  }
  const char* algorithm() const noexcept { return algorithm_; }
  // Every peer gets, and sends, a header, whose signature (padded to kStreamAlign) is followed by
  // `bytes` of `payload` (copied now; a multiple of kStreamAlign, at most
  // kHeaderPayloadMaxBytes); the streams are then padded by pad messages only, never inside the
  // header, so that a rank that builds the op in two phases and one that builds it in one post
  // the same messages.
  // Every rank of the op must make the same call with the same size. What a peer sent lies at
  // received_payload(peer) once the first phase completed (a continuation may read it): the
  // exchange costs no message of its own where the op talks to every peer anyway.
  void carry_in_header(const void* payload, std::size_t bytes);
  const std::uint8_t* received_payload(int peer) const {
    return received_header(peer) + kStreamAlign;
  }

  // ---- for the Executor ----
  std::vector<Task>& tasks() noexcept { return tasks_; }
  const std::vector<TaskId>& successors() const noexcept { return succ_; }
  const std::vector<TaskId>& send_fifo(int peer) const {
    return send_fifo_[static_cast<std::size_t>(peer)];
  }
  const std::vector<TaskId>& recv_fifo(int peer) const {
    return recv_fifo_[static_cast<std::size_t>(peer)];
  }
  const OpSignature& signature() const noexcept { return sig_; }
  const LocalWork& local_work(std::size_t index) const { return calls_[index]; }
  // The header received from peer (valid once its header task completed).
  const std::uint8_t* received_header(int peer) const {
    return headers_in_[static_cast<std::size_t>(peer)].data();
  }

 private:
  TaskId add(Task t, std::initializer_list<TaskId> deps);
  // Bytes a FIFO moves on its stream.
  std::size_t stream_bytes(const std::vector<TaskId>& fifo) const;
  // Puts the op's header at the front of one of the peer's FIFOs (a send: this rank's; a recv:
  // the one the peer sends) and its pad, if any, at the back (stream_framing()).
  void frame_stream(TaskKind kind, int peer, bool header = true);
  void add_header(TaskKind kind, int peer, std::vector<TaskId>& fifo, std::size_t header_bytes);
  // Successor lists in CSR form, dependency counts.
  void freeze();
  bool on_other_host(int group_peer) const;
  // Scratch for the wire sends' staging slots (finalize()).
  void allocate_staging();
  // A peer as the current view names it -> its group rank.
  int group_rank(int peer) const;
  // A send (src) or recv (dst) task, appended to the peer's FIFO.
  TaskId transfer(TaskKind kind, int peer, void* dst, const void* src, std::size_t bytes,
                  std::initializer_list<TaskId> deps);
  TaskId one_sided(TaskKind kind, int peer, const MemoryKey* key, std::size_t offset, void* dst,
                   const void* src, std::size_t bytes, std::initializer_list<TaskId> deps);

  int rank_;
  int size_;
  std::vector<int> members_;  // the current view (empty: the whole group)
  int view_rank_ = 0;
  TaskId gate_ = kNoTask;
  DataType dtype_;
  ReduceOp op_;
  ScratchArena& arena_;
  std::vector<Task> tasks_;
  std::vector<LocalWork> calls_;                  // call tasks' work, by Task::size
  std::vector<std::pair<TaskId, TaskId>> edges_;  // (earlier, later) until finalize
  std::vector<TaskId> succ_;                      // CSR after finalize
  std::vector<std::uint32_t> succ_counts_;        // finalize()'s per-task tally
  std::vector<std::vector<TaskId>> send_fifo_;
  std::vector<std::vector<TaskId>> recv_fifo_;
  OpSignature sig_{};
  WireHeader header_out_{};
  std::vector<WireHeader> headers_in_;
  std::vector<WirePad> pads_in_;     // where each peer's pad lands (read and dropped)
  Continuation next_;                // then()
  const char* algorithm_ = nullptr;  // set_algorithm()
  bool pad_with_messages_ = false;   // carry_in_header(), a continuation
  std::array<std::uint8_t, kHeaderPayloadMaxBytes> payload_{};  // carry_in_header()
  std::size_t payload_bytes_ = 0;
  // set_wire(), AllowWire
  std::optional<DataType> wire_;
  const std::vector<int>* host_of_ = nullptr;
  bool multi_host_ = false;
  bool wire_allowed_ = false;
  struct Staging {
    std::byte* base = nullptr;
    std::size_t slot_bytes = 0;
  };
  std::vector<Staging> staging_;  // by peer
};

}  // namespace chorus::cpu
