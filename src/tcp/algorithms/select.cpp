// SPDX-License-Identifier: BSD-3-Clause
// Algorithm choice by (op, bytes, world size). The small/large switch for allreduce,
// broadcast and reduce is TcpGroupOptions::small_allreduce_bytes (measured: see
// docs/architecture.md); world size 1 is a local copy.
#include <string_view>

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
    case OpKind::broadcast:
    case OpKind::barrier:
      break;
  }
}

}  // namespace

const char* choose_algorithm(int size, const CollectiveArgs& a) {
  if (size == 1) {
    return "local";
  }
  const bool small = a.count * element_size(a.dtype) <= a.small_bytes;
  switch (a.kind) {
    case OpKind::allreduce:
      return small ? "recursive_doubling" : "ring";
    case OpKind::allgather:
    case OpKind::reduce_scatter:
      return "ring";
    case OpKind::broadcast:
    case OpKind::reduce:
      return small ? "tree" : "chain";
    case OpKind::gather:
    case OpKind::scatter:
      return "direct";
    case OpKind::all_to_all:
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
  const bool latency = algorithm == "recursive_doubling" || algorithm == "tree";
  switch (a.kind) {
    case OpKind::allreduce:
      return latency ? build_rd_allreduce(s, a) : build_ring_allreduce(s, a);
    case OpKind::allgather:
      return build_ring_allgather(s, a);
    case OpKind::reduce_scatter:
      return build_ring_reduce_scatter(s, a);
    case OpKind::broadcast:
      return latency ? build_tree_broadcast(s, a) : build_chain_broadcast(s, a);
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
  }
  CHORUS_CHECK(false, "unknown op kind {}", static_cast<int>(a.kind));
}

}  // namespace chorus::tcp
