// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup: a set of ranks running collectives together; OpDescriptor, one op of a group
// described as data; and the backend factories.
//
// Every op goes through one entry, ProcessGroup::run(OpDescriptor): the C++ methods
// (allreduce(), all_to_allv() ...) are inline sugar that describe their op, the C ABI's
// chorus_run and the torch backend describe theirs with the same descriptor, so an op's
// argument rules, sequence numbering, deadline and tracing exist once. A new op is a new
// OpType, a row in the shape-rule table and the backends' implementation. The sugar being
// inline, the library's ABI is run() and the handles, not one symbol per op. Programs that
// forward ops generically (bindings, schedulers) use run() directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/options.hpp>
#include <chorus/store.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include <chorus/work.hpp>

namespace chorus {

// recv()'s source for a message from any rank (MPI_ANY_SOURCE).
inline constexpr int kAnySource = -1;

// What an op does. The ProcessGroup method of the same name documents each one's shapes.
enum class OpType : std::uint8_t {
  allreduce,
  allgather,
  reduce_scatter,
  broadcast,
  reduce,
  gather,
  scatter,
  all_to_all,
  barrier,
  send,
  recv,
  allgatherv,       // counts per rank: out_counts
  reduce_scatterv,  // counts per rank: in_counts
  all_to_allv,      // counts per rank: in_counts (sent) and out_counts (received)
};
inline constexpr int kNumOpTypes = 14;
// "allreduce", "all_to_allv" ...; "?" if out of range.
CHORUS_API const char* to_string(OpType type) noexcept;

// One op, as plain data. Fields an op does not use are ignored (their defaults are fine).
// Tensors are borrowed until the op's Work completes; the count vectors are copied by run().
struct OpDescriptor {
  OpType type = OpType::barrier;
  Tensor in;   // the input (broadcast: the tensor, in place; send/recv: the message)
  Tensor out;  // the output (broadcast, send, recv, barrier: unused)
  // Elements per rank for the variable-size collectives, block j belonging to rank j and the
  // blocks laid out back to back in rank order: allgatherv's output (out_counts),
  // reduce_scatterv's input (in_counts), all_to_allv's input and output (both). Every rank
  // passes the same counts to allgatherv and reduce_scatterv; all_to_allv's in_counts[j] on
  // rank i equals out_counts[i] on rank j.
  std::vector<std::size_t> in_counts;
  std::vector<std::size_t> out_counts;
  ReduceOp op = ReduceOp::sum;      // allreduce, reduce_scatter(v), reduce
  int root = 0;                     // broadcast, reduce, gather, scatter
  int peer = -1;                    // send: the destination; recv: the source, or kAnySource
  std::uint32_t tag = 0;            // send, recv
  std::optional<Duration> timeout;  // unset: the group's timeout
  // allreduce, reduce_scatter, reduce: the wire between hosts (AllreduceOptions::wire_dtype).
  std::optional<DataType> wire_dtype;
  // Coalesced: several tensors, one op (torch's allreduce_coalesced, an NCCL group of calls).
  // When `ins` is not empty the op runs on the pairs (ins[i], outs[i]) instead of in/out, which
  // must then be empty. Each pair has the shape the op has on one tensor (allreduce: equal
  // counts; allgather: outs[i] holds size x ins[i], rank-major; reduce_scatter: ins[i] holds
  // size x outs[i]), any count, 0 included; all tensors have one dtype. In place: outs[i] is
  // ins[i] (allgather, reduce_scatter: the rank's block of the larger one, as on one tensor);
  // otherwise an input overlaps no output, and no two outputs overlap. It is one op: one
  // sequence number, one deadline, one Work, and on every rank the same number of tensors
  // with the same counts. allreduce, allgather and reduce_scatter only.
  std::vector<Tensor> ins;
  std::vector<Tensor> outs;
};

namespace detail {
class Backend;       // src/core/backend.hpp: the engine behind a group
struct GroupAccess;  // src/core/backend.hpp: how chorus's own layers reach it
}  // namespace detail

// Every rank of a group issues the same collectives in the same order; chorus checks that and
// fails naming both signatures and ranks if they differ. Passing the same Tensor as input and
// output means in-place. Tensors are borrowed until the returned Work completes.
//
// A ProcessGroup is a handle: its state (sequence numbers, locks, the flight recorder, the
// backend's engine) lives inside the library, so none of it is part of the ABI. Every op goes
// through run(): it checks the descriptor against the op's shape rules (throwing
// InvalidArgument on the calling rank before anything is sent), fails fast if the group was
// aborted (rethrowing the original error), assigns the sequence number and deadline, then
// hands the op to the backend. The named methods below are inline sugar that build the
// descriptor.
//
// Thread-safe, and issue order is execution order. Each call takes its sequence number and
// hands the op to the backend as one step, under a per-group lock, so ops run in the order
// their calls took that lock (their `seq`) on every thread and every rank. Across threads that
// order is whatever the threads' timing makes it: when several threads issue collectives on one
// group, the program must make the interleaving the same on every rank (e.g. one thread per
// kind of op and a fixed hand-off between them, or threads that issue identical collectives),
// exactly as with one thread. Tagged send/recv are matched by (peer, tag), not by position, so
// threads may issue them in any interleaving. A Work::then() callback may issue new ops.
//
// Backend limits: the nccl backend has no message tags and no receive from any source (NCCL
// matches point-to-point messages by issue order per peer pair): it accepts tag 0 only and a
// recv from a named rank, and rejects anything else with InvalidArgument.
class CHORUS_API ProcessGroup final {
 public:
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  const std::string& name() const noexcept;
  Duration timeout() const noexcept;
  const char* backend_name() const noexcept;  // "tcp", "nccl"
  // The device that tensors of this group must live on.
  Device device() const noexcept;

  // The one entry: runs the op `op` describes (OpDescriptor above). Throws InvalidArgument when the
  // descriptor breaks its op's rules (the methods below state them).
  std::shared_ptr<Work> run(const OpDescriptor& op);

  // The named ops: each builds its OpDescriptor and calls run().
  //
  // out = reduction of every rank's in. in and out have equal count and dtype.
  std::shared_ptr<Work> allreduce(Tensor in, Tensor out, const AllreduceOptions& options = {}) {
    OpDescriptor op = describe(OpType::allreduce, in, out, options.timeout);
    op.op = options.op;
    op.wire_dtype = options.wire_dtype;
    return run(op);
  }
  std::shared_ptr<Work> allreduce(Tensor inout, const AllreduceOptions& options = {}) {
    return allreduce(inout, inout, options);
  }
  // out = concatenation of every rank's in, in rank order. out.count() == size() * in.count().
  // In-place when in is out.slice(rank() * n, n).
  std::shared_ptr<Work> allgather(Tensor in, Tensor out, const CollectiveOptions& options = {}) {
    return run(describe(OpType::allgather, in, out, options.timeout));
  }
  // out (count n) = this rank's block of the reduction of every rank's in (count size() * n).
  std::shared_ptr<Work> reduce_scatter(Tensor in, Tensor out,
                                       const ReduceScatterOptions& options = {}) {
    OpDescriptor op = describe(OpType::reduce_scatter, in, out, options.timeout);
    op.op = options.op;
    op.wire_dtype = options.wire_dtype;
    return run(op);
  }
  // Every rank's inout becomes root's inout.
  std::shared_ptr<Work> broadcast(Tensor inout, const RootOptions& options = {}) {
    OpDescriptor op = describe(OpType::broadcast, inout, inout, options.timeout);
    op.root = options.root;
    return run(op);
  }
  // Root's out = reduction of every rank's in; out is ignored on other ranks (may be empty).
  std::shared_ptr<Work> reduce(Tensor in, Tensor out, const ReduceOptions& options = {}) {
    OpDescriptor op = describe(OpType::reduce, in, out, options.timeout);
    op.op = options.op;
    op.root = options.root;
    op.wire_dtype = options.wire_dtype;
    return run(op);
  }
  // Root's out (count size() * n) = every rank's in (count n), in rank order; out ignored
  // elsewhere.
  std::shared_ptr<Work> gather(Tensor in, Tensor out, const RootOptions& options = {}) {
    OpDescriptor op = describe(OpType::gather, in, out, options.timeout);
    op.root = options.root;
    return run(op);
  }
  // Each rank's out (count n) = block rank() of root's in (count size() * n); in ignored
  // elsewhere.
  std::shared_ptr<Work> scatter(Tensor in, Tensor out, const RootOptions& options = {}) {
    OpDescriptor op = describe(OpType::scatter, in, out, options.timeout);
    op.root = options.root;
    return run(op);
  }
  // Block j of rank i's in goes to block i of rank j's out. in and out have size() * n elements.
  std::shared_ptr<Work> all_to_all(Tensor in, Tensor out, const CollectiveOptions& options = {}) {
    return run(describe(OpType::all_to_all, in, out, options.timeout));
  }
  // Completes once every rank has entered the barrier.
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) {
    return run(describe(OpType::barrier, Tensor(), Tensor(), options.timeout));
  }
  // Tagged point-to-point. A send matches the recv on dst with the same tag and sender; the
  // counts and dtypes must match. Does not take a collective sequence number's place: p2p ops
  // are not checked against other ranks' collectives. A recv's src may be kAnySource: it takes
  // the first message with its tag from any rank (each sender's messages still in the order
  // sent; of recvs that match a message, the one posted first takes it), and its Work's
  // source_rank() names the sender. See the class comment for the nccl backend's limits.
  std::shared_ptr<Work> send(Tensor tensor, int dst, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {}) {
    OpDescriptor op = describe(OpType::send, tensor, Tensor(), options.timeout);
    op.peer = dst;
    op.tag = tag;
    return run(op);
  }
  std::shared_ptr<Work> recv(Tensor tensor, int src, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {}) {
    OpDescriptor op = describe(OpType::recv, tensor, Tensor(), options.timeout);
    op.peer = src;
    op.tag = tag;
    return run(op);
  }

  // The variable-size collectives: `counts` has size() entries, rank j's block has counts[j]
  // elements, and blocks lie back to back in rank order. Every rank passes the same counts.
  // out (sum of counts) = every rank's in (counts[rank()] elements), in rank order. In-place
  // when in is out's block rank().
  std::shared_ptr<Work> allgatherv(Tensor in, Tensor out, std::vector<std::size_t> counts,
                                   const CollectiveOptions& options = {}) {
    OpDescriptor op = describe(OpType::allgatherv, in, out, options.timeout);
    op.out_counts = std::move(counts);
    return run(op);
  }
  // out (counts[rank()] elements) = block rank() of the reduction of every rank's in (sum of
  // counts). In-place when out is in's block rank().
  std::shared_ptr<Work> reduce_scatterv(Tensor in, Tensor out, std::vector<std::size_t> counts,
                                        const ReduceScatterOptions& options = {}) {
    OpDescriptor op = describe(OpType::reduce_scatterv, in, out, options.timeout);
    op.in_counts = std::move(counts);
    op.op = options.op;
    return run(op);
  }
  // Block j of in (in_counts[j] elements) goes to rank j; block i of out (out_counts[i]) comes
  // from rank i. in_counts[j] on rank i must equal out_counts[i] on rank j. Out-of-place only.
  std::shared_ptr<Work> all_to_allv(Tensor in, Tensor out, std::vector<std::size_t> in_counts,
                                    std::vector<std::size_t> out_counts,
                                    const CollectiveOptions& options = {}) {
    OpDescriptor op = describe(OpType::all_to_allv, in, out, options.timeout);
    op.in_counts = std::move(in_counts);
    op.out_counts = std::move(out_counts);
    return run(op);
  }

  // Fails every pending and future op. The error is Error{aborted, reason} unless the group
  // already failed (then the first error stays). Thread-safe, idempotent, bounded in time,
  // needs no cooperation from the peers.
  void abort(const std::string& reason);
  // True once the group failed or was aborted; failure() then holds the first error.
  bool is_aborted() const noexcept;
  std::exception_ptr failure() const;

  // Collective over the whole group: every rank calls it with the same `ranks` (sorted,
  // distinct, in [0, size())). Returns the new group on members (its rank = index in
  // `ranks`), nullptr on the others. Blocks until the subgroup is connected, within the
  // group's timeout.
  std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks, GroupOptions options = {});

  // Elastic recovery, collective over the survivors of a failure: every rank still alive calls
  // it (typically after an op failed). Aborts this group (ops in flight fail at once, with the
  // first error), agrees through the store on who is still here (waiting up to options.grace for
  // a rank this rank does not know to be dead), and returns the survivors' group: the same
  // store, ranks renumbered in the order of the old ones. A rank that arrives after the survivors
  // decided is fenced out: Error{aborted} saying so; nothing it sends reaches their group (new
  // connections, new group id). A survivor that dies while the group forms is left out in a new
  // round. Called on a healthy group, it returns a group of every rank. tcp backend only
  // (nccl: InvalidArgument).
  std::shared_ptr<ProcessGroup> shrink(ShrinkOptions options = {});

  // Elastic growth, collective over the group: every member calls it at the same point (a step
  // boundary). Admits every process waiting in join_tcp_group() on this group's lobby (the name
  // its make_tcp_group() was given, on the same store), waiting up to options.wait for a first
  // one, and returns the larger group: the members keep their ranks, the joiners follow in the
  // order they arrived. nullptr when nobody is waiting (one store round trip on rank 0 and a
  // 16-byte broadcast: cheap enough for every step). This group stays as it was, and usable:
  // if forming the larger group fails anywhere (a joiner died), grow() throws on every member
  // and this group goes on. Sending the joiners the state they need is the caller's: a
  // broadcast from a member on the returned group. Groups made by make_tcp_group(), and shrunk
  // or grown from one; not a split() subgroup. tcp backend only (nccl: InvalidArgument).
  std::shared_ptr<ProcessGroup> grow(GrowOptions options = {});
  // Joiners waiting now or later get Error{aborted} carrying `reason` (e.g. "the job finished"):
  // call it where the job stops calling grow(), so that a replacement started late exits
  // instead of waiting out JoinOptions::wait. Any member may call it; once is enough.
  void stop_admitting(const std::string& reason);

 private:
  friend struct detail::GroupAccess;
  explicit ProcessGroup(std::unique_ptr<detail::Backend> backend) noexcept;
  static OpDescriptor describe(OpType type, Tensor in, Tensor out,
                               std::optional<Duration> timeout) {
    OpDescriptor op;
    op.type = type;
    op.in = in;
    op.out = out;
    op.timeout = timeout;
    return op;
  }

  std::unique_ptr<detail::Backend> backend_;  // never null
};

// The tcp backend: CPU tensors, ring algorithms over TCP. Collective over ranks [0, size):
// every rank calls it. Blocks until every rank has joined and this rank's ring neighbours
// (and, with shared memory, the ranks of its host) are connected; links to other peers are
// made when an op first needs them (CHORUS_MAX_PEER_SOCKETS bounds them). Past the group's
// timeout it throws TimeoutError naming the ranks that never showed up. The group keeps
// `store`.
CHORUS_API std::shared_ptr<ProcessGroup> make_tcp_group(std::shared_ptr<Store> store, int rank,
                                                        int size, TcpGroupOptions options = {});
// A new process joining a running tcp group: waits (up to options.wait) until a member calls
// ProcessGroup::grow(), then returns the larger group, in which this process has a rank after
// the members'. `store` and `tcp.group.name` are those the members' make_tcp_group() was given
// (init_world_from_env() does this for a process launched with CHORUS_ELASTIC_JOIN=1); the
// group's name and timeout are the members' (tcp.group is only the lobby's name). Throws
// Error{aborted} when the members stopped admitting (stop_admitting()), TimeoutError when
// nobody admitted it in time: the members never see such a process.
CHORUS_API std::shared_ptr<ProcessGroup> join_tcp_group(std::shared_ptr<Store> store,
                                                        TcpGroupOptions tcp = {},
                                                        JoinOptions options = {});
// The nccl backend: CUDA tensors. Throws BackendError if chorus was built without NCCL.
CHORUS_API std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank,
                                                         int size, NcclGroupOptions options = {});
// True if this build of chorus contains the nccl backend.
CHORUS_API bool nccl_available() noexcept;

}  // namespace chorus
