// SPDX-License-Identifier: BSD-3-Clause
// Algorithm choice by (op, bytes, world size). The small/large switch for allreduce,
// broadcast and reduce is TcpGroupOptions::small_allreduce_bytes (measured: see
// docs/architecture.md); world size 1 is a local copy.
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

void build_schedule(Schedule& s, const CollectiveArgs& a) {
  if (s.size() == 1) {
    return build_single_rank(s, a);
  }
  const std::size_t bytes = a.count * element_size(a.dtype);
  const bool small = bytes <= a.small_bytes;
  switch (a.kind) {
    case OpKind::allreduce:
      return small ? build_rd_allreduce(s, a) : build_ring_allreduce(s, a);
    case OpKind::allgather:
      return build_ring_allgather(s, a);
    case OpKind::reduce_scatter:
      return build_ring_reduce_scatter(s, a);
    case OpKind::broadcast:
      return small ? build_tree_broadcast(s, a) : build_chain_broadcast(s, a);
    case OpKind::reduce:
      return small ? build_tree_reduce(s, a) : build_chain_reduce(s, a);
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
