// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup: a set of ranks running collectives together, and the backend factories.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/op.hpp>
#include <chorus/options.hpp>
#include <chorus/store.hpp>
#include <chorus/tensor.hpp>
#include <chorus/work.hpp>

namespace chorus {

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
// hands the op to the backend. The named methods below are sugar that build the descriptor.
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

  // The one entry: runs the op `op` describes (see op.hpp). Throws InvalidArgument when the
  // descriptor breaks its op's rules (the methods below state them).
  std::shared_ptr<Work> run(const OpDescriptor& op);

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
  // source_rank() names the sender. See the class comment for the nccl backend's limits.
  std::shared_ptr<Work> send(Tensor tensor, int dst, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {});
  std::shared_ptr<Work> recv(Tensor tensor, int src, std::uint32_t tag = 0,
                             const CollectiveOptions& options = {});

  // The variable-size collectives: `counts` has size() entries, rank j's block has counts[j]
  // elements, and blocks lie back to back in rank order. Every rank passes the same counts.
  // out (sum of counts) = every rank's in (counts[rank()] elements), in rank order. In-place
  // when in is out's block rank().
  std::shared_ptr<Work> allgatherv(Tensor in, Tensor out, std::vector<std::size_t> counts,
                                   const CollectiveOptions& options = {});
  // out (counts[rank()] elements) = block rank() of the reduction of every rank's in (sum of
  // counts). In-place when out is in's block rank().
  std::shared_ptr<Work> reduce_scatterv(Tensor in, Tensor out, std::vector<std::size_t> counts,
                                        const ReduceScatterOptions& options = {});
  // Block j of in (in_counts[j] elements) goes to rank j; block i of out (out_counts[i]) comes
  // from rank i. in_counts[j] on rank i must equal out_counts[i] on rank j. Out-of-place only.
  std::shared_ptr<Work> all_to_allv(Tensor in, Tensor out, std::vector<std::size_t> in_counts,
                                    std::vector<std::size_t> out_counts,
                                    const CollectiveOptions& options = {});

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

 private:
  friend struct detail::GroupAccess;
  explicit ProcessGroup(std::unique_ptr<detail::Backend> backend) noexcept;

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
// The nccl backend: CUDA tensors. Throws BackendError if chorus was built without NCCL.
CHORUS_API std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank,
                                                         int size, NcclGroupOptions options = {});
// True if this build of chorus contains the nccl backend.
CHORUS_API bool nccl_available() noexcept;

}  // namespace chorus
