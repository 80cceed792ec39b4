// SPDX-License-Identifier: BSD-3-Clause
// The registry: every algorithm file's rows, gathered by op (registry.hpp), the algorithms'
// names, and the group-wide facts a cost is computed from (Selection).
#include "cpu/algorithms/registry.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "core/check.hpp"
#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {

bool Selection::several_hosts() const noexcept {
  return hosts != nullptr && hosts->members.size() > 1;
}

int Selection::ranks_per_host() const noexcept {
  if (hosts == nullptr) {
    return size;
  }
  std::size_t most = 1;
  for (const auto& m : hosts->members) {
    most = std::max(most, m.size());
  }
  return static_cast<int>(most);
}

LinkCost Selection::host_link() const noexcept {
  LinkCost link = (*costs)[PeerClass::same_host];
  link.alpha_us *= std::max(1.0, ranks_per_host() / std::max(1.0, costs->host_cpus));
  return link;
}

LinkCost Selection::flat_link() const noexcept {
  return several_hosts() ? (*costs)[PeerClass::other_host] : host_link();
}

namespace {

// Every algorithm file, in the order of preference where costs tie (the single-copy
// algorithms after the others).
constexpr AlgorithmRows (*kAlgorithmFiles[])() noexcept = {
    ring_allreduce_algorithms, rd_allreduce_algorithms, hd_allreduce_algorithms,
    hier_allreduce_algorithms, allgather_algorithms,    reduce_scatter_algorithms,
    broadcast_algorithms,      rooted_algorithms,       all_to_all_algorithms,
    barrier_algorithms,        direct_algorithms,
};

// The rows of each op, gathered from the files once.
using ByOp = std::array<std::vector<AlgorithmSpec>, kNumOpTypes>;
ByOp gather_rows() {
  ByOp by_op;
  for (const auto rows_of : kAlgorithmFiles) {
    for (const AlgorithmSpec& row : rows_of()) {
      auto& rows = by_op[static_cast<std::size_t>(row.kind)];
      CHORUS_CHECK(std::none_of(rows.begin(), rows.end(),
                                [&](const AlgorithmSpec& r) { return r.id == row.id; }),
                   "two registry rows for {} {}", to_string(row.kind), algorithm_name(row.id));
      rows.push_back(row);
    }
  }
  return by_op;
}
const ByOp& by_op() {
  static const ByOp rows = gather_rows();
  return rows;
}

}  // namespace

using A = AlgorithmId;

const char* algorithm_name(AlgorithmId id) noexcept {
  switch (id) {
    case A::automatic:
      return "default";
    case A::local:
      return "local";
    case A::ring:
      return "ring";
    case A::recursive_doubling:
      return "recursive_doubling";
    case A::halving_doubling:
      return "halving_doubling";
    case A::hierarchical:
      return "hierarchical";
    case A::direct:
      return "direct";
    case A::tree:
      return "tree";
    case A::chain:
      return "chain";
    case A::pairwise:
      return "pairwise";
    case A::dissemination:
      return "dissemination";
  }
  return "unknown";
}

std::span<const AlgorithmSpec> algorithms_of(OpType kind) noexcept {
  const auto index = static_cast<std::size_t>(kind);
  return index < by_op().size() ? std::span<const AlgorithmSpec>(by_op()[index])
                                : std::span<const AlgorithmSpec>();
}

const AlgorithmSpec* find_algorithm(OpType kind, AlgorithmId id) noexcept {
  for (const AlgorithmSpec& a : algorithms_of(kind)) {
    if (a.id == id) {
      return &a;
    }
  }
  return nullptr;
}

const AlgorithmSpec* find_algorithm(OpType kind, std::string_view name) noexcept {
  for (const AlgorithmSpec& a : algorithms_of(kind)) {
    if (name == algorithm_name(a.id)) {
      return &a;
    }
  }
  return nullptr;
}

}  // namespace chorus::cpu
