// SPDX-License-Identifier: BSD-3-Clause
// Algorithm choice by (op, bytes, world size). The small/large switch for allreduce,
// broadcast and reduce is TcpGroupOptions::small_allreduce_bytes (measured: see
// docs/results.md); world size 1 is a local copy.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chorus/errors.hpp>

#include "core/check.hpp"
#include "tcp/algorithms/algorithms.hpp"

namespace chorus::tcp {
namespace {

void build_single_rank(Schedule& s, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * element_size(a.dtype);
  switch (a.kind) {
    case OpKind::allreduce:
    case OpKind::reduce:
    case OpKind::allgather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter:
    case OpKind::all_to_all:
      // avg over one rank is the value itself.
      s.copy(a.out, a.in, bytes);
      break;
    case OpKind::allgatherv:
    case OpKind::reduce_scatterv:
    case OpKind::all_to_allv:
      return build_variable_single_rank(s, a);
    case OpKind::broadcast:
    case OpKind::barrier:
      break;
  }
}

struct OpAlgorithms {
  OpKind kind;
  std::vector<const char*> names;
};

const std::vector<OpAlgorithms>& algorithm_table() {
  static const std::vector<OpAlgorithms> table = {
      {OpKind::allreduce,
       {"ring", "recursive_doubling", "halving_doubling", "hierarchical", "direct"}},
      {OpKind::allgather, {"ring", "direct"}},
      {OpKind::reduce_scatter, {"ring", "direct"}},
      {OpKind::broadcast, {"tree", "chain", "direct"}},
      {OpKind::reduce, {"tree", "chain"}},
      {OpKind::gather, {"direct"}},
      {OpKind::scatter, {"direct"}},
      {OpKind::all_to_all, {"pairwise"}},
      {OpKind::barrier, {"dissemination"}},
      {OpKind::allgatherv, {"pairwise"}},
      {OpKind::reduce_scatterv, {"pairwise"}},
      {OpKind::all_to_allv, {"pairwise"}},
  };
  return table;
}

// The single-copy algorithms (direct.cpp) against the rings over shared memory, measured on
// the 2-core machine (docs/results.md, "Single-copy algorithms against the rings"): the
// kernel's copy between address spaces runs at about a third of memcpy's speed there, while
// the rings reduce straight out of shared memory and keep looking for data instead of
// sleeping. The rings win every op at 1-8 MiB and every op but allreduce at 64 MiB; allreduce
// at 64 MiB and 3 ranks is the one place direct won (3.64 against 3.21 GB/s; a tie at 4). So
// direct is the default only there: allreduce, from 3 ranks and 64 MiB, where halving-doubling
// does not apply (below). The other ops run it only when CHORUS_ALGO asks.
constexpr int kDirectMinRanks = 3;
constexpr std::size_t kDirectMinAllreduceBytes = std::size_t{64} << 20;

// Halving-doubling against the ring, 4 and 8 ranks on the 2-core machine (docs/results.md,
// "Halving-doubling against the ring"): its 2 log2 n rounds beat the ring's 2(n-1) over
// loopback sockets from 512 KiB to 1 MiB (1 MiB, 4 ranks: 1.22 against 0.72 GB/s busbw) and
// tie from 2 MiB on; over shared memory they won at every size measured, 256 KiB to 64 MiB
// (64 MiB, 4 ranks: 2.46 GB/s against 2.10 for direct). At 3 ranks (a folded pair) the ring
// won. So: a power of two from 4 ranks, above the latency algorithms' sizes; up to 2 MiB over
// sockets.
constexpr int kHalvingDoublingMinRanks = 4;
constexpr std::size_t kHalvingDoublingMaxSocketBytes = std::size_t{2} << 20;

bool halving_doubling_pays(int size, std::size_t bytes, const CollectiveArgs& a) {
  const bool power_of_two = (size & (size - 1)) == 0;
  return power_of_two && size >= kHalvingDoublingMinRanks && bytes > a.small_bytes &&
         (a.shared_memory || bytes <= kHalvingDoublingMaxSocketBytes);
}

}  // namespace

AlgorithmOverrides parse_algorithm_overrides(const std::string& text) {
  AlgorithmOverrides out{};
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string entry = text.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = entry.find('=');
    const std::string op = entry.substr(0, eq);
    const std::string name = eq == std::string::npos ? "" : entry.substr(eq + 1);
    const OpAlgorithms* row = nullptr;
    for (const OpAlgorithms& r : algorithm_table()) {
      if (op == to_string(r.kind)) {
        row = &r;
      }
    }
    if (row == nullptr) {
      throw InvalidArgument(fmt::format(
          "CHORUS_ALGO='{}': '{}' names no collective; use op=algorithm entries separated by "
          "commas, e.g. allreduce=ring,broadcast=tree",
          text, entry));
    }
    const auto it = std::find_if(row->names.begin(), row->names.end(),
                                 [&](const char* n) { return name == n; });
    if (it == row->names.end()) {
      throw InvalidArgument(fmt::format("CHORUS_ALGO='{}': {} has no algorithm '{}'; it has {}",
                                        text, op, name, fmt::join(row->names, ", ")));
    }
    out[static_cast<std::size_t>(row->kind)] = *it;
  }
  return out;
}

const char* choose_algorithm(int size, const CollectiveArgs& a) {
  if (size == 1) {
    return "local";
  }
  const bool hierarchical_applies = a.hosts != nullptr && a.hosts->mixed() && a.op != ReduceOp::avg;
  const std::string_view forced = a.forced == nullptr ? "" : a.forced;
  if (!forced.empty() && (forced != "hierarchical" || hierarchical_applies) &&
      (forced != "direct" || a.peer_memory)) {
    return a.forced;
  }
  const std::size_t bytes = a.count * element_size(a.dtype);
  const bool small = bytes <= a.small_bytes;
  // SharedBuffers on every rank (the signature says so): the direct algorithms read and write
  // them through mappings, and beat the rings (docs/results.md, "SharedBuffers: the mapped
  // single-copy path").
  const bool direct =
      a.shared_buffers || (a.kind == OpKind::allreduce && a.peer_memory &&
                           size >= kDirectMinRanks && bytes >= kDirectMinAllreduceBytes);
  switch (a.kind) {
    case OpKind::allreduce:
      if (forced.empty() && hierarchical_applies) {
        return "hierarchical";
      }
      return a.shared_buffers                        ? "direct"
             : small                                 ? "recursive_doubling"
             : halving_doubling_pays(size, bytes, a) ? "halving_doubling"
             : direct                                ? "direct"
                                                     : "ring";
    case OpKind::allgather:
    case OpKind::reduce_scatter:
      return direct ? "direct" : "ring";
    case OpKind::broadcast:
      return direct ? "direct" : small ? "tree" : "chain";
    case OpKind::reduce:
      return small ? "tree" : "chain";
    case OpKind::gather:
    case OpKind::scatter:
      return "direct";
    case OpKind::all_to_all:
    case OpKind::allgatherv:
    case OpKind::reduce_scatterv:
    case OpKind::all_to_allv:
      return "pairwise";
    case OpKind::barrier:
      return "dissemination";
  }
  CHORUS_CHECK(false, "unknown op kind {}", static_cast<int>(a.kind));
  return "";
}

void build_schedule(Schedule& s, const CollectiveArgs& a) {
  const std::string_view algorithm = choose_algorithm(s.size(), a);
  if (algorithm == "local") {
    return build_single_rank(s, a);
  }
  if (algorithm == "hierarchical") {
    return build_hierarchical_allreduce(s, a);
  }
  const bool latency = algorithm == "recursive_doubling" || algorithm == "tree";
  const bool direct = algorithm == "direct";
  switch (a.kind) {
    case OpKind::allreduce:
      return direct                            ? build_direct_allreduce(s, a)
             : latency                         ? build_rd_allreduce(s, a)
             : algorithm == "halving_doubling" ? build_hd_allreduce(s, a)
                                               : build_ring_allreduce(s, a);
    case OpKind::allgather:
      return direct ? build_direct_allgather(s, a) : build_ring_allgather(s, a);
    case OpKind::reduce_scatter:
      return direct ? build_direct_reduce_scatter(s, a) : build_ring_reduce_scatter(s, a);
    case OpKind::broadcast:
      return direct    ? build_direct_broadcast(s, a)
             : latency ? build_tree_broadcast(s, a)
                       : build_chain_broadcast(s, a);
    case OpKind::reduce:
      return latency ? build_tree_reduce(s, a) : build_chain_reduce(s, a);
    case OpKind::gather:
      return build_gather(s, a);
    case OpKind::scatter:
      return build_scatter(s, a);
    case OpKind::all_to_all:
      return build_all_to_all(s, a);
    case OpKind::barrier:
      return build_barrier(s, a);
    case OpKind::allgatherv:
      return build_pairwise_allgatherv(s, a);
    case OpKind::reduce_scatterv:
      return build_pairwise_reduce_scatterv(s, a);
    case OpKind::all_to_allv:
      return build_pairwise_all_to_allv(s, a);
  }
  CHORUS_CHECK(false, "unknown op kind {}", static_cast<int>(a.kind));
}

}  // namespace chorus::tcp
