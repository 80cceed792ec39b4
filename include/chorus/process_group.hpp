// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup: a set of ranks running collectives together, and the backend factories.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/options.hpp>
#include <chorus/store.hpp>
#include <chorus/tensor.hpp>
#include <chorus/work.hpp>

namespace chorus {

// recv()'s src for a message from any rank (MPI_ANY_SOURCE).
inline constexpr int kAnySource = -1;

// Identifies one call: its sequence number in the group, kind and deadline. Built by the
// ProcessGroup base after argument checks and passed to the backend.
struct OpCall {
  std::uint64_t seq = 0;  // 1-based, per group, in issue order
  const char* name = "";  // "allreduce" ...
  Duration timeout{0};    // as resolved from the call's or the group's options
  Deadline deadline = Deadline::never();
  Clock::time_point issued{};      // when the call took its seq: deadline - timeout, unsaturated
  std::uint64_t trace_record = 0;  // the op's flight recorder entry (0: recording is off)
};

class FlightRecorder;  // src/core/flight_recorder.hpp
struct TraceEntry;

// Every rank of a group issues the same collectives in the same order; chorus checks that and
// fails naming both signatures and ranks if they differ. Passing the same Tensor as input and
// output means in-place. Tensors are borrowed until the returned Work completes.
//
// The public methods are non-virtual: they check arguments (throwing InvalidArgument on the
// calling rank before anything is sent), fail fast if the group was aborted (rethrowing the
// original error), assign the sequence number and deadline, then call the backend's do_<op>().
// Thread-safe, and issue order is execution order. Each public call takes its sequence number
// and hands the op to the backend as one step, under a per-group lock, so ops run in the order
// their calls took that lock (their `seq`) on every thread and every rank. Across threads that
// order is whatever the threads' timing makes it: when several threads issue collectives on one
// group, the program must make the interleaving the same on every rank (e.g. one thread per
// kind of op and a fixed hand-off between them, or threads that issue identical collectives),
// exactly as with one thread. Tagged send/recv are matched by (peer, tag), not by position, so
// threads may issue them in any interleaving. A Work::then() callback may issue new ops.
class CHORUS_API ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  Duration timeout() const noexcept { return timeout_; }
  virtual const char* backend_name() const noexcept = 0;
  // The device that tensors of this group must live on.
  virtual Device device() const noexcept = 0;

  // out = reduction of every rank's in. in and out have equal count and dtype.
  std::shared_ptr<Work> allreduce(Tensor in, Tensor out, const AllreduceOptions& options = {});
  std::shared_ptr<Work> allreduce(Tensor inout, const AllreduceOptions& options = {}) {
    return allreduce(inout, inout, options);
  }
  // out = concatenation of every rank's in, in rank order. out.count() == size() * in.count().
  // In-place when in is out.slice(rank() * n, n).
  std::shared_ptr<Work> allgather(Tensor in, Tensor out, const CollectiveOptions& options = {});
  // out (count n) = this rank's block of the reduction of every rank's in (count size() * n).
  std::shared_ptr<Work> reduce_scatter(Tensor in, Tensor out,
                                       const ReduceScatterOptions& options = {});
  // Every rank's inout becomes root's inout.
  std::shared_ptr<Work> broadcast(Tensor inout, const RootOptions& options = {});
  // Root's out = reduction of every rank's in; out is ignored on other ranks (may be empty).
  std::shared_ptr<Work> reduce(Tensor in, Tensor out, const ReduceOptions& options = {});
  // Root's out (count size() * n) = every rank's in (count n), in rank order; out ignored
  // elsewhere.
  std::shared_ptr<Work> gather(Tensor in, Tensor out, const RootOptions& options = {});
  // Each rank's out (count n) = block rank() of root's in (count size() * n); in ignored
  // elsewhere.
  std::shared_ptr<Work> scatter(Tensor in, Tensor out, const RootOptions& options = {});
  // Block j of rank i's in goes to block i of rank j's out. in and out have size() * n elements.
  std::shared_ptr<Work> all_to_all(Tensor in, Tensor out, const CollectiveOptions& options = {});
  // Completes once every rank has entered the barrier.
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {});
  // Tagged point-to-point. A send matches the recv on dst with the same tag and sender; the
  // counts and dtypes must match. Does not take a collective sequence number's place: p2p ops
  // are not checked against other ranks' collectives. A recv's src may be kAnySource: it takes
  // the first message with its tag from any rank (each sender's messages still in the order
  // sent; of recvs that match a message, the one posted first takes it), and its Work's
  // source_rank() names the sender. The nccl backend has no receive from any source.
  std::shared_ptr<Work> send(Tensor tensor, int dst, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {});
  std::shared_ptr<Work> recv(Tensor tensor, int src, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {});

  // Fails every pending and future op. The error is Error{aborted, reason} unless the group
  // already failed (then the first error stays). Thread-safe, idempotent, bounded in time,
  // needs no cooperation from the peers.
  virtual void abort(const std::string& reason) = 0;
  // True once the group failed or was aborted; failure() then holds the first error.
  bool is_aborted() const noexcept { return failed_.load(std::memory_order_acquire); }
  std::exception_ptr failure() const;

  // Collective over the whole group: every rank calls it with the same `ranks` (sorted,
  // distinct, in [0, size())). Returns the new group on members (its rank = index in
  // `ranks`), nullptr on the others. Blocks until the subgroup is connected, within the
  // group's timeout.
  virtual std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks,
                                              GroupOptions options = {}) = 0;

 protected:
  ProcessGroup(int rank, int size, const GroupOptions& options);

  // Records the first failure; later public calls rethrow it. Returns false if one was
  // already recorded (the first error stays). Backends call this when they poison the group.
  bool record_failure(std::exception_ptr error) noexcept;
  // Notes in the group's flight recorder that the op started, and with which algorithm
  // (a static string). Backends call it from any thread; a no-op when recording is off.
  void trace_started(const OpCall& call, const char* algorithm) noexcept;
  // Allreduces of at most `bytes` bytes are recorded in the flight recorder by the backend,
  // through trace_issued(), instead of before do_allreduce(): a backend that may run them on
  // the issuing thread then records their issue and start in one update.
  void record_small_allreduces_late(std::size_t bytes) noexcept { late_record_bytes_ = bytes; }
  // Records the op being issued if its record was left to the backend (a no-op otherwise),
  // as started at its issue time with `algorithm` if that is not null. do_allreduce() calls it
  // before any other thread may see the op (trace_started() needs the entry).
  void trace_issued(const OpCall& call, const char* algorithm) noexcept;
  // Throws InvalidArgument unless t lives on device() (checked by every public method).
  virtual void check_device(const Tensor& t, const char* what, const char* op_name) const;

  // Backends implement these. Arguments are already validated; `call` carries seq/deadline.
  virtual std::shared_ptr<Work> do_allreduce(Tensor in, Tensor out, ReduceOp op,
                                             const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_allgather(Tensor in, Tensor out, const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(Tensor in, Tensor out, ReduceOp op,
                                                  const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_broadcast(Tensor inout, int root, const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_reduce(Tensor in, Tensor out, ReduceOp op, int root,
                                          const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_gather(Tensor in, Tensor out, int root, const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_scatter(Tensor in, Tensor out, int root, const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_all_to_all(Tensor in, Tensor out, const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_barrier(const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_send(Tensor tensor, int dst, std::uint32_t tag,
                                        const OpCall& call) = 0;
  virtual std::shared_ptr<Work> do_recv(Tensor tensor, int src, std::uint32_t tag,
                                        const OpCall& call) = 0;

 private:
  // `late`: the op's record is left to the backend (trace_issued()).
  OpCall begin(const char* name, const std::optional<Duration>& timeout, bool collective,
               TraceEntry& trace, bool late = false);
  // Records the op's end in the flight recorder when `work` completes; returns `work`.
  std::shared_ptr<Work> traced(const OpCall& call, std::shared_ptr<Work> work);
  FlightRecorder& recorder();
  void rethrow_if_failed() const;

  int rank_;
  int size_;
  std::string name_;
  Duration timeout_;
  // Held from taking a sequence number until the backend has queued the op, so that issue
  // order (seq) is execution order across threads. Recursive: a Work::then() callback that
  // runs inline (the op failed at once) may issue the next op from inside a call.
  std::recursive_mutex issue_mu_;
  std::uint64_t next_seq_ = 1;      // collectives; guarded by issue_mu_
  std::uint64_t next_p2p_seq_ = 1;  // send/recv; guarded by issue_mu_
  std::atomic<bool> failed_{false};
  std::exception_ptr failure_;  // written once, before failed_ is set (release)
  std::atomic<bool> failure_claimed_{false};
  // The last ops, for dumps on failure and SIGUSR1 (CHORUS_TRACE_BUFFER entries). Made on
  // first use: the backend's name is not known while the base is constructed.
  std::size_t trace_capacity_ = 0;
  std::once_flag recorder_once_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::atomic<FlightRecorder*> recorder_made_{nullptr};  // recorder_.get() once made
  std::size_t late_record_bytes_ = 0;                    // record_small_allreduces_late(); 0: none
  // The entry of the op being issued while its record is left to the backend (begin()'s
  // caller's). Guarded by issue_mu_.
  const TraceEntry* unrecorded_ = nullptr;
};

// The tcp backend: CPU tensors, ring algorithms over TCP. Collective over ranks [0, size):
// every rank calls it. Blocks until every rank has joined and this rank's ring neighbours
// (and, with shared memory, the ranks of its host) are connected; links to other peers are
// made when an op first needs them (CHORUS_MAX_PEER_SOCKETS bounds them). Past the group's
// timeout it throws TimeoutError naming the ranks that never showed up. The group keeps
// `store`.
CHORUS_API std::shared_ptr<ProcessGroup> make_tcp_group(std::shared_ptr<Store> store, int rank,
                                                        int size, TcpGroupOptions options = {});
// The nccl backend: CUDA tensors. Throws BackendError if chorus was built without NCCL.
CHORUS_API std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank,
                                                         int size, NcclGroupOptions options = {});
// True if this build of chorus contains the nccl backend.
CHORUS_API bool nccl_available() noexcept;

}  // namespace chorus
