// SPDX-License-Identifier: BSD-3-Clause
// Each algorithm's declaration: where it runs and what it costs. A cost is the rounds it
// waits through (α each) plus the bytes on its busiest rank's link (β each); an algorithm
// that reduces a whole message after receiving it, instead of slice by slice while the next
// one arrives, adds the reduction's time (cost_model.hpp).
#include "cpu/algorithms/registry.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/op_rules.hpp"
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
  LinkCost link = shared_memory || several_hosts() ? costs->shm : costs->socket;
  link.alpha_us *= std::max(1.0, ranks_per_host() / std::max(1.0, costs->host_cpus));
  return link;
}

LinkCost Selection::flat_link() const noexcept {
  return several_hosts() ? costs->network : host_link();
}

namespace {

// ---- arithmetic shared by the costs ----

struct PowerOfTwo {
  int p;        // the largest power of two <= n
  int log2p;    // its logarithm
  bool folded;  // n > p: the extra ranks fold into pairs first (two more transfers)
};
PowerOfTwo power_of_two_below(int n) {
  int p = 1;
  int l = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++l;
  }
  return {p, l, n > p};
}
int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n) {
    ++l;
  }
  return l;
}
// Microseconds to reduce `bytes` (0 for ops that do not reduce).
double reduce_us(const Selection& s, double bytes) {
  return op_rule(s.kind).reduces ? bytes / (s.costs->reduce_gbps * 1e3) : 0;
}
// A pipelined step hides its reductions behind its transfers, all but the last slice's: what
// one step of `block` bytes adds.
double last_slice_reduce_us(const Selection& s, double block) {
  return reduce_us(s, std::min(block, s.slice_bytes));
}

bool always(const Selection&) { return true; }
double free_of_choice(const Selection&) { return 0; }  // the op's only algorithm

// The cost of one algorithm split into its rounds and its bytes: the hierarchical allreduce
// adds up its phases' rounds but overlaps their bytes.
struct Phase {
  double alpha_us;  // its rounds
  double bytes_us;  // its bytes (and reductions)
  double total() const { return alpha_us + bytes_us; }
};
Phase cheaper(const Phase& a, const Phase& b) { return a.total() <= b.total() ? a : b; }
Phase phase(const LinkCost& link, double rounds, double bytes, double extra_us = 0) {
  return {rounds * link.alpha_us, bytes / (link.gbps * 1e3) + extra_us};
}

// ---- allreduce ----

// Each round exchanges the whole buffer with one partner, then reduces it; folding sends an
// extra rank's buffer to its partner (one more reduction) and the result back.
Phase recursive_doubling(const Selection& s, const LinkCost& link, int n) {
  const PowerOfTwo t = power_of_two_below(n);
  const double rounds = t.log2p + (t.folded ? 2 : 0);
  const double reductions = t.log2p + (t.folded ? 1 : 0);
  return phase(link, rounds, rounds * s.bytes, reductions * reduce_us(s, s.bytes));
}
// Reduce-scatter then allgather around the ring: 2(n-1) rounds of 1/n of the buffer, the
// reductions pipelined with the transfers slice by slice.
Phase ring_allreduce(const Selection& s, const LinkCost& link, int n) {
  return phase(link, 2.0 * (n - 1), 2.0 * (n - 1) / n * s.bytes,
               (n - 1) * last_slice_reduce_us(s, s.bytes / n));
}
double recursive_doubling_us(const Selection& s) {
  return recursive_doubling(s, s.flat_link(), s.size).total();
}
double ring_allreduce_us(const Selection& s) {
  return ring_allreduce(s, s.flat_link(), s.size).total();
}
// The ring's bytes in 2 log2 n rounds, pipelined slice by slice; folding pairs first costs
// two whole-buffer transfers.
double halving_doubling_us(const Selection& s) {
  const PowerOfTwo t = power_of_two_below(s.size);
  const double p = t.p;
  const double fold = t.folded ? 2 * s.bytes : 0;
  const double reductions =
      t.log2p * last_slice_reduce_us(s, s.bytes / p) + (t.folded ? reduce_us(s, s.bytes) : 0);
  return phase(s.flat_link(), 2 * t.log2p + (t.folded ? 2 : 0), 2 * (p - 1) / p * s.bytes + fold,
               reductions)
      .total();
}
// Two rounds (addresses, then the done bytes); each rank moves its chunk from and to every
// other rank, all ranks at once, with process_vm_readv/writev or, between SharedBuffers,
// memcpy.
LinkCost direct_link(const Selection& s) {
  return {s.host_link().alpha_us,
          s.shared_buffers ? s.costs->memcpy_gbps : s.costs->peer_copy_gbps};
}
double direct_allreduce_us(const Selection& s) {
  const double n = s.size;
  return direct_link(s).us(2, 2 * (n - 1) / n * s.bytes);
}
bool direct_runs(const Selection& s) { return s.peer_memory; }

// Binomial tree (latency) or pipelined chain (bandwidth) over `n` ranks on `link`: the
// broadcast and reduce algorithms, and the hierarchical allreduce's phases inside a host.
Phase tree(const Selection& s, const LinkCost& link, int n) {
  // The root sends (or receives and reduces) the whole buffer once per round.
  const double rounds = ceil_log2(n);
  return phase(link, rounds, rounds * s.bytes, rounds * reduce_us(s, s.bytes));
}
Phase chain(const Selection& s, const LinkCost& link, int n) {
  // k slices through n - 1 hops: n - 2 + k slice times, each a slice's transfer and, for a
  // reduce, its reduction (one stage of the pipeline).
  const double k = std::max(1.0, std::ceil(s.bytes / s.slice_bytes));
  const double steps = n - 2 + k;
  return phase(link, steps, steps * s.bytes / k, steps * reduce_us(s, s.bytes / k));
}

// Several hosts, several ranks on one of them; avg would divide in every phase.
bool hierarchical_runs(const Selection& s) {
  return s.hosts != nullptr && s.hosts->mixed() && s.op != ReduceOp::avg;
}
// Reduce inside each host, allreduce among the hosts' leaders over the network, broadcast
// inside each host. The phases pipeline segment by segment, so their rounds add up while
// their bytes overlap: the slowest phase's bytes count.
double hierarchical_us(const Selection& s) {
  const int local = s.ranks_per_host();
  const int hosts = static_cast<int>(s.hosts->members.size());
  const Phase reduce = cheaper(tree(s, s.host_link(), local), chain(s, s.host_link(), local));
  const Phase leaders = cheaper(recursive_doubling(s, s.costs->network, hosts),
                                ring_allreduce(s, s.costs->network, hosts));
  Selection as_broadcast = s;
  as_broadcast.kind = OpType::broadcast;
  const Phase bcast =
      cheaper(tree(as_broadcast, s.host_link(), local), chain(as_broadcast, s.host_link(), local));
  return reduce.alpha_us + leaders.alpha_us + bcast.alpha_us +
         std::max({reduce.bytes_us, leaders.bytes_us, bcast.bytes_us});
}

// ---- allgather and reduce_scatter (bytes: one rank's block) ----

double ring_block_us(const Selection& s) {
  const double n = s.size;
  return s.flat_link().us(n - 1, (n - 1) * s.bytes) + (n - 1) * last_slice_reduce_us(s, s.bytes);
}
double direct_block_us(const Selection& s) {
  const double n = s.size;
  return direct_link(s).us(2, (n - 1) * s.bytes);
}

// ---- broadcast and reduce ----

double tree_us(const Selection& s) { return tree(s, s.flat_link(), s.size).total(); }
double chain_us(const Selection& s) { return chain(s, s.flat_link(), s.size).total(); }
// Every non-root rank reads the root's buffer at once.
double direct_broadcast_us(const Selection& s) { return direct_link(s).us(2, s.bytes); }

// Where the single-copy algorithms may be the default (docs/results.md, "Single-copy
// algorithms against the rings", "SharedBuffers: the mapped single-copy path", "Algorithm
// choice: the cost model"): between SharedBuffers from 256 KiB (below, the address exchange
// costs more than a round's α says, and the rings and the board won). Never with private
// buffers: process_vm_readv pins every page and its copies compete for the CPUs with every
// other rank's, which the probe's one cached 1 MiB copy does not show (at 8 ranks and 512 KiB,
// where the model preferred it, it took twice halving-doubling's time). Forced, they run at any
// size.
bool direct_may_be_default(const Selection& s) {
  return s.shared_buffers && s.bytes >= static_cast<double>(kSharedBufferMinBytes);
}

using A = AlgorithmId;
using K = OpType;
constexpr AlgorithmSpec kRegistry[] = {
    {K::allreduce, A::ring, always, always, false, ring_allreduce_us, build_ring_allreduce},
    {K::allreduce, A::recursive_doubling, always, always, true, recursive_doubling_us,
     build_rd_allreduce},
    {K::allreduce, A::halving_doubling, always, always, false, halving_doubling_us,
     build_hd_allreduce},
    {K::allreduce, A::hierarchical, hierarchical_runs, always, false, hierarchical_us,
     build_hierarchical_allreduce},
    {K::allreduce, A::direct, direct_runs, direct_may_be_default, false, direct_allreduce_us,
     build_direct_allreduce},
    {K::allgather, A::ring, always, always, false, ring_block_us, build_ring_allgather},
    {K::allgather, A::direct, direct_runs, direct_may_be_default, false, direct_block_us,
     build_direct_allgather},
    {K::reduce_scatter, A::ring, always, always, false, ring_block_us, build_ring_reduce_scatter},
    {K::reduce_scatter, A::direct, direct_runs, direct_may_be_default, false, direct_block_us,
     build_direct_reduce_scatter},
    {K::broadcast, A::tree, always, always, true, tree_us, build_tree_broadcast},
    {K::broadcast, A::chain, always, always, false, chain_us, build_chain_broadcast},
    {K::broadcast, A::direct, direct_runs, direct_may_be_default, false, direct_broadcast_us,
     build_direct_broadcast},
    {K::reduce, A::tree, always, always, true, tree_us, build_tree_reduce},
    {K::reduce, A::chain, always, always, false, chain_us, build_chain_reduce},
    {K::gather, A::direct, always, always, false, free_of_choice, build_gather},
    {K::scatter, A::direct, always, always, false, free_of_choice, build_scatter},
    {K::all_to_all, A::pairwise, always, always, false, free_of_choice, build_all_to_all},
    {K::barrier, A::dissemination, always, always, false, free_of_choice, build_barrier},
    {K::allgatherv, A::pairwise, always, always, false, free_of_choice, build_pairwise_allgatherv},
    {K::reduce_scatterv, A::pairwise, always, always, false, free_of_choice,
     build_pairwise_reduce_scatterv},
    {K::all_to_allv, A::pairwise, always, always, false, free_of_choice,
     build_pairwise_all_to_allv},
};

// algorithms_of() hands out one op's rows as a span: they must be adjacent.
constexpr bool each_op_adjacent() {
  const std::size_t n = std::size(kRegistry);
  for (std::size_t i = 1; i < n; ++i) {
    for (std::size_t j = 0; j + 1 < i; ++j) {
      if (kRegistry[j].kind == kRegistry[i].kind && kRegistry[i - 1].kind != kRegistry[i].kind) {
        return false;
      }
    }
  }
  return true;
}
static_assert(each_op_adjacent(), "kRegistry: keep the rows of one op together");

}  // namespace

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
  // The rows of one op are adjacent.
  const std::span<const AlgorithmSpec> all(kRegistry);
  const auto first =
      std::find_if(all.begin(), all.end(), [&](const AlgorithmSpec& a) { return a.kind == kind; });
  const auto last =
      std::find_if(first, all.end(), [&](const AlgorithmSpec& a) { return a.kind != kind; });
  return {first, last};
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
