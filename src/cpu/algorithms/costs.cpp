// SPDX-License-Identifier: BSD-3-Clause
// What each algorithm costs, and where it runs, under the group's α/β figures: the functions
// the algorithm files' registry rows name. A cost is the rounds it waits through (α each) plus
// the bytes on its busiest rank's link (β each); an algorithm that reduces a whole message
// after receiving it, instead of slice by slice while the next one arrives, adds the
// reduction's time (cost_model.hpp).
#include "cpu/algorithms/costs.hpp"

#include <algorithm>
#include <cmath>

#include "core/op_rules.hpp"
#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {

// ---- arithmetic shared by the costs ----

namespace {

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
}  // namespace

bool always(const Selection&) { return true; }
double free_of_choice(const Selection&) { return 0; }  // the op's only algorithm

namespace {

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
}  // namespace

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

namespace {

// Two rounds (addresses, then the done bytes); each rank moves its chunk from and to every
// other rank, all ranks at once, with process_vm_readv/writev or, between SharedBuffers,
// memcpy.
LinkCost direct_link(const Selection& s) {
  return {s.host_link().alpha_us,
          s.shared_buffers ? s.costs->memcpy_gbps : s.costs->peer_copy_gbps};
}
}  // namespace

double direct_allreduce_us(const Selection& s) {
  const double n = s.size;
  return direct_link(s).us(2, 2 * (n - 1) / n * s.bytes);
}
bool direct_runs(const Selection& s) { return s.peer_memory; }

namespace {

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
}  // namespace

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
  const LinkCost& network = (*s.costs)[PeerClass::other_host];
  const Phase leaders =
      cheaper(recursive_doubling(s, network, hosts), ring_allreduce(s, network, hosts));
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

}  // namespace chorus::cpu
