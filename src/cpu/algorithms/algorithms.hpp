// SPDX-License-Identifier: BSD-3-Clause
// The collective algorithms: each builds a Schedule for one rank. They see only the
// Schedule and the rest of the plan (plan/), never a transport.
#pragma once

#include "core/private.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/shared_buffer.hpp>

#include "core/signature.hpp"
#include "cpu/algorithms/registry.hpp"
#include "cpu/plan/cost_model.hpp"
#include "cpu/plan/one_sided.hpp"
#include "cpu/plan/schedule.hpp"

namespace chorus::cpu {

// What a rank tells its peers in a direct op's first part: the keys of its input and output
// (OneSided::register_buffer). A multiple of the stream alignment, so that it needs no padding.
struct BufferKeys {
  MemoryKey in;
  MemoryKey out;
};
static_assert(sizeof(BufferKeys) % kStreamAlign == 0);
static_assert(sizeof(BufferKeys) <= kHeaderPayloadMaxBytes);  // build_memory_agreement

// Which ranks of a group share a host (host_id.hpp), for the hierarchical algorithms.
struct HostMap {
  std::vector<int> host_of;               // by rank: index into members
  std::vector<std::vector<int>> members;  // by host (in order of their lowest rank): sorted ranks
  // True when a hierarchical algorithm pays: several hosts, and one of them with several ranks.
  bool mixed() const noexcept;
};
// Groups ranks by equal host ids ("" counts as a host of its own).
HostMap make_host_map(const std::vector<std::string>& host_ids);

// One tensor pair of a coalesced op (OpDescriptor::ins/outs); count as OpSignature::count
// for the op on that pair alone.
struct CoalescedPart {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t count = 0;
};

// Validated arguments of one collective. Counts follow OpSignature::count.
struct CollectiveArgs {
  OpType kind = OpType::barrier;
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::uint8;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  // The narrower type the op's data travels in between hosts (core/wire.hpp; unset: full
  // precision), for the algorithms that take it (Schedule::AllowWire).
  std::optional<DataType> wire;
  // The variable-size collectives' elements per rank (OpDescriptor::in_counts/out_counts,
  // size() entries; owned by the Op); null for the other ops.
  const std::size_t* in_counts = nullptr;
  const std::size_t* out_counts = nullptr;
  // A coalesced op's pairs (num_parts of them, owned by the Op); in and out are then null and
  // count is the sum of the parts' counts. No algorithm sees them: build_schedule() packs them
  // into scratch around the op's ordinary algorithm (coalesced.cpp).
  const CoalescedPart* parts = nullptr;
  std::size_t num_parts = 0;
  // TcpGroupOptions: the hierarchical allreduce's phases use their latency algorithms up to
  // small_bytes; slice_bytes per pipeline slice.
  std::size_t small_bytes = 64 * 1024;
  std::size_t slice_bytes = 256 * 1024;
  const HostMap* hosts = nullptr;               // the group's hosts (nullptr: treat as one host)
  AlgorithmId forced = AlgorithmId::automatic;  // CHORUS_ALGO's algorithm for this op, if any
  const LinkCosts* costs = nullptr;  // the group's stack's figures (nullptr: the defaults)
  // The transport's one-sided capability (Transport::one_sided()), offered by every rank of
  // the group or by none; the single-copy "direct" algorithms need it.
  OneSided* one_sided = nullptr;
  // one_sided is there: the direct algorithms run. A group-wide fact, like the next.
  bool peer_memory = false;
  // Set only in the second phase of an op whose choice depends on the memory kinds
  // (build_memory_agreement): every rank's buffers that peers touch lie in SharedBuffers, as
  // the keys of the first phase showed every rank; and those keys, by group rank.
  bool shared_buffers = false;
  const BufferKeys* keys = nullptr;
};

// Ops whose buffers may go through the peers' SharedBuffer mappings, from this many bytes
// (the op's count in bytes); below it the rings and the board win. The same on every rank.
inline constexpr std::size_t kSharedBufferMinBytes = kSharedBufferMinOpBytes;
// Whether `kind` has a direct algorithm that maps SharedBuffers.
inline bool maps_shared_buffers(OpType kind) noexcept {
  return kind == OpType::allreduce || kind == OpType::reduce_scatter || kind == OpType::allgather ||
         kind == OpType::broadcast;
}
// Whether the op's algorithm depends on the kinds of memory its ranks pass (SharedBuffers or
// not), which the ranks do not know of each other before the op: then it is built by
// build_memory_agreement. Group-wide inputs only, so every rank answers alike.
bool needs_memory_agreement(int size, const CollectiveArgs& a) noexcept;
// The op in two phases (direct.cpp): every rank sends its buffers' keys to every peer, inside
// the op's signature headers (Schedule::carry_in_header: no message of their own); a rank
// whose own buffers are not all SharedBuffers knows the outcome at once (not every rank passed
// them) and builds the chosen algorithm right behind the keys, in the same schedule; a rank
// whose buffers are SharedBuffers builds the rest once the keys arrived (Schedule::then()),
// chosen with shared_buffers = whether every rank's keys are mappable. Either way each stream
// carries the same messages.
void build_memory_agreement(Schedule& s, const CollectiveArgs& a);

// CHORUS_ALGO: "op=algorithm[,op=algorithm...]", e.g. "allreduce=ring,broadcast=tree".
// Indexed by OpType (point-to-point entries stay automatic); automatic where the cost model
// chooses. Throws InvalidArgument naming the
// variable, the entry and the algorithms that op has.
using AlgorithmOverrides = std::array<AlgorithmId, kNumOpTypes>;
AlgorithmOverrides parse_algorithm_overrides(const std::string& text);

// The selection inputs of an op (registry.hpp).
Selection selection_of(int size, const CollectiveArgs& a);
// The algorithm for the op: `local` for one rank; else the forced one where it runs; else the
// cheapest that runs and may be the default at this size (ties: the registry's order). Every
// input is group-wide, so every rank picks the same one.
AlgorithmId select_algorithm(int size, const CollectiveArgs& a);
// Its name (a static string, for the flight recorder and logs).
const char* choose_algorithm(int size, const CollectiveArgs& a);
// Builds the op into `s` (not finalized): a coalesced op packed (build_coalesced), an op whose
// algorithm depends on every rank's memory kind agreed in-band (build_memory_agreement), else
// build_chosen().
void build_schedule(Schedule& s, const CollectiveArgs& a);
// Builds the algorithm select_algorithm() picks, with no in-band agreement: for buffers every
// rank knows to be private (a coalesced op's packed scratch), and agreement's own phases.
void build_chosen(Schedule& s, const CollectiveArgs& a);
// The choice for every op at each size in `sizes` (bytes), with the predicted time of each
// algorithm that may be the default: "op bytes chosen (alg us, alg us, ...)" lines. `group`
// carries the group-wide fields (hosts, peer_memory, costs).
std::string describe_choices(int size, const CollectiveArgs& group,
                             const std::vector<std::size_t>& sizes);

// A coalesced op: packs its parts, builds the op's algorithm on the packed buffer, unpacks.
void build_coalesced(Schedule& s, const CollectiveArgs& a);
void build_ring_allreduce(Schedule& s, const CollectiveArgs& a);
void build_rd_allreduce(Schedule& s, const CollectiveArgs& a);
// Reduce-scatter by recursive halving, allgather by recursive doubling.
void build_hd_allreduce(Schedule& s, const CollectiveArgs& a);
// Reduce to each host's lowest rank, allreduce among those, broadcast back inside each host.
void build_hierarchical_allreduce(Schedule& s, const CollectiveArgs& a);
void build_ring_allgather(Schedule& s, const CollectiveArgs& a);
// Single-copy algorithms through the other ranks' memory (direct.cpp; needs one_sided).
void build_direct_allreduce(Schedule& s, const CollectiveArgs& a);
void build_direct_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void build_direct_allgather(Schedule& s, const CollectiveArgs& a);
void build_direct_broadcast(Schedule& s, const CollectiveArgs& a);
void build_ring_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void build_chain_broadcast(Schedule& s, const CollectiveArgs& a);
void build_tree_broadcast(Schedule& s, const CollectiveArgs& a);
void build_chain_reduce(Schedule& s, const CollectiveArgs& a);
void build_tree_reduce(Schedule& s, const CollectiveArgs& a);
void build_gather(Schedule& s, const CollectiveArgs& a);
void build_scatter(Schedule& s, const CollectiveArgs& a);
void build_all_to_all(Schedule& s, const CollectiveArgs& a);
void build_barrier(Schedule& s, const CollectiveArgs& a);

// ---- helpers shared by the algorithm files ----

// Block c of `count` elements split into n near-equal blocks (the first count % n get one more).
struct Span {
  std::size_t offset = 0;  // elements
  std::size_t count = 0;
};
inline Span block_of(std::size_t count, int n, int c) {
  const auto un = static_cast<std::size_t>(n);
  const auto uc = static_cast<std::size_t>(c);
  const std::size_t base = count / un;
  const std::size_t extra = count % un;
  return {uc * base + std::min(uc, extra), base + (uc < extra ? 1 : 0)};
}
// Element offsets of the blocks of a variable-size collective: block j (counts[j] elements)
// starts at offsets[j]; offsets[n] is the total.
inline std::vector<std::size_t> block_offsets(const std::size_t* counts, int n) {
  std::vector<std::size_t> offsets(static_cast<std::size_t>(n) + 1, 0);
  for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
    offsets[j + 1] = offsets[j] + counts[j];
  }
  return offsets;
}
// Elements per pipeline slice (at least one).
inline std::size_t slice_elems(const CollectiveArgs& a) {
  return std::max<std::size_t>(1, a.slice_bytes / element_size(a.dtype));
}
inline std::size_t num_slices(std::size_t count, std::size_t per_slice) {
  return (count + per_slice - 1) / per_slice;
}
inline int mod(int x, int n) { return ((x % n) + n) % n; }
inline std::byte* at(void* base, std::size_t elems, DataType dt) {
  return static_cast<std::byte*>(base) + elems * element_size(dt);
}
inline const std::byte* at(const void* base, std::size_t elems, DataType dt) {
  return static_cast<const std::byte*>(base) + elems * element_size(dt);
}
// What every ring algorithm starts from: this rank's place in the ring and the slice size.
struct RingSetup {
  int n;     // world size
  int r;     // this rank
  int next;  // r + 1 mod n: where this rank sends
  int prev;  // r - 1 mod n: where it receives from
  DataType dt;
  std::size_t es;   // bytes per element
  std::size_t per;  // elements per pipeline slice
};
inline RingSetup ring_setup(const Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  return {n, r, mod(r + 1, n), mod(r - 1, n), a.dtype, element_size(a.dtype), slice_elems(a)};
}
// Elements in slice j of a block of `count` elements cut into slices of `per`.
inline std::size_t slice_count(std::size_t count, std::size_t per, std::size_t j) {
  return std::min(per, count - j * per);
}
// Receive slots of the pipelined algorithms: enough to keep a few slices in flight.
inline constexpr std::size_t kPipelineSlots = 4;
// Elements per receive slot: a slice, or less when no message of the op is that large (the
// largest message is `largest` elements). A 7-element op then takes 7-element slots, not
// kPipelineSlots x slice_bytes of scratch.
inline std::size_t slot_elems(std::size_t per_slice, std::size_t largest) {
  return std::max<std::size_t>(1, std::min(per_slice, largest));
}

}  // namespace chorus::cpu
