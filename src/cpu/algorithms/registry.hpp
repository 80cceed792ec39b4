// SPDX-License-Identifier: BSD-3-Clause
// The algorithm registry: every algorithm of every collective, with which ops, sizes and
// topologies it runs on and its cost under the group's α/β figures (cost_model.hpp). The
// choice (select.cpp) is the cheapest algorithm that applies; CHORUS_ALGO forces one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/signature.hpp"
#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

class Schedule;
struct CollectiveArgs;
struct HostMap;

// Every algorithm, by name. `automatic` is "no forced algorithm" (CHORUS_ALGO does not name
// this op); `local` is the copy of a group of one rank.
enum class AlgorithmId : std::uint8_t {
  automatic,
  local,
  ring,
  recursive_doubling,
  halving_doubling,
  hierarchical,
  direct,
  tree,
  chain,
  pairwise,
  dissemination,
};
// The name CHORUS_ALGO, the flight recorder and the logs use ("ring", ...; "default" for
// automatic). A static string.
const char* algorithm_name(AlgorithmId id) noexcept;

// What an algorithm's applicability and cost depend on: the op, its size and the group-wide
// facts every rank shares (never this rank's own state).
struct Selection {
  OpType kind = OpType::barrier;
  ReduceOp op = ReduceOp::sum;
  int size = 1;            // world size
  double bytes = 0;        // the op's count in bytes (OpSignature::count x element size)
  double slice_bytes = 1;  // the pipelined algorithms' slice
  double small_bytes = 0;  // TcpGroupOptions::small_allreduce_bytes
  const HostMap* hosts = nullptr;
  bool peer_memory = false;
  bool shared_buffers = false;
  const LinkCosts* costs = nullptr;  // never null here (select.cpp fills in the defaults)

  // Whether the group spans several hosts (HostMap::members has more than one host).
  bool several_hosts() const noexcept;
  // The slowest link a flat algorithm's messages cross: to other hosts, else the host's.
  LinkCost flat_link() const noexcept;
  // The link to ranks of the same host (as the transport that serves them priced it), its
  // rounds dearer where the host's ranks outnumber its CPUs (LinkCosts::host_cpus).
  LinkCost host_link() const noexcept;
  // The most ranks any host of the group runs.
  int ranks_per_host() const noexcept;
};

// One algorithm of one op.
struct AlgorithmSpec {
  OpType kind;
  AlgorithmId id;
  // Whether it can run for this op on this group (forced where it cannot, the choice falls
  // back to the cheapest that can).
  bool (*runs)(const Selection&);
  // Whether it may be the default: always, except where a measured effect the α/β model does
  // not capture rules it out (its comment in registry.cpp says which).
  bool (*may_be_default)(const Selection&);
  // A latency algorithm: the default only up to small_allreduce_bytes (TcpGroupOptions), the
  // user's bound on the cost model (0 forces the pipelined algorithms).
  bool latency;
  // Predicted microseconds for the op (only compared with the others of the same op).
  double (*cost_us)(const Selection&);
  void (*build)(Schedule&, const CollectiveArgs&);
};

// Each algorithm file's rows, defined at the end of that file: the algorithms it builds, for
// which ops, and what they cost. registry.cpp lists the files; an op's rows keep the order of
// that list and of each file (the order of preference where costs tie).
using AlgorithmRows = std::span<const AlgorithmSpec>;
AlgorithmRows ring_allreduce_algorithms() noexcept;
AlgorithmRows rd_allreduce_algorithms() noexcept;
AlgorithmRows hd_allreduce_algorithms() noexcept;
AlgorithmRows hier_allreduce_algorithms() noexcept;
AlgorithmRows allgather_algorithms() noexcept;
AlgorithmRows reduce_scatter_algorithms() noexcept;
AlgorithmRows broadcast_algorithms() noexcept;
AlgorithmRows rooted_algorithms() noexcept;
AlgorithmRows all_to_all_algorithms() noexcept;
AlgorithmRows barrier_algorithms() noexcept;
AlgorithmRows direct_algorithms() noexcept;

// The algorithms of `kind`, in order of preference where costs tie.
std::span<const AlgorithmSpec> algorithms_of(OpType kind) noexcept;
// The spec of (kind, id), or nullptr if that op has no such algorithm.
const AlgorithmSpec* find_algorithm(OpType kind, AlgorithmId id) noexcept;
// The algorithm of `kind` called `name`, or nullptr.
const AlgorithmSpec* find_algorithm(OpType kind, std::string_view name) noexcept;

}  // namespace chorus::cpu
