// SPDX-License-Identifier: BSD-3-Clause
// Rooted collectives: reduce (binomial tree when small, pipelined chain when large), gather
// and scatter (direct: each rank exchanges its block with the root; the root's transport
// serves all peers at once).
//
// Tree reduce, positions v = r - root (mod n): v receives from its children v + 2^k (every
// 2^k < lowbit(v), all k for the root) in increasing k, reduces each into its accumulator
// (the root's out, scratch elsewhere) and then sends it to v - lowbit(v). The fixed order of
// children makes the root's result deterministic; its last reduction divides for avg.
// Chain reduce, positions p = r - root - 1 (mod n), so the root is last: p = 0 sends its
// input, each later position reduces each arriving slice with its own input and forwards it,
// and the root reduces the last hop into out. Slices pipeline as in the ring algorithms.
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_tree_reduce(Schedule& s, const CollectiveArgs& a) {
  const Schedule::AllowWire wire(s);  // the result lives on the root only
  const int n = s.size();
  const int v = mod(s.rank() - a.root, n);
  auto real = [&](int pos) { return mod(pos + a.root, n); };
  const std::size_t bytes = a.count * element_size(a.dtype);
  const int limit = v == 0 ? n : (v & -v);
  std::vector<int> children;
  for (int k = 1; k < limit && v + k < n; k <<= 1) {
    children.push_back(v + k);
  }
  if (v != 0 && children.empty()) {
    s.send(real(v - limit), a.in, bytes);
    return;
  }
  void* acc = v == 0 ? a.out : s.scratch(bytes);
  const void* cur = a.in;
  TaskId ready = kNoTask;
  for (std::size_t i = 0; i < children.size(); ++i) {
    void* tmp = s.scratch(bytes);
    const TaskId rv = s.recv(real(children[i]), tmp, bytes);
    const bool last = v == 0 && i + 1 == children.size();
    ready = s.reduce(acc, cur, tmp, a.count, last && a.op == ReduceOp::avg ? n : 0, {rv, ready});
    cur = acc;
  }
  if (v != 0) {
    s.send(real(v - limit), acc, bytes, {ready});
  }
}

void build_chain_reduce(Schedule& s, const CollectiveArgs& a) {
  const Schedule::AllowWire wire(s);  // the result lives on the root only
  const int n = s.size();
  const int p = mod(s.rank() - a.root - 1, n);
  auto real = [&](int pos) { return mod(pos + a.root + 1, n); };
  const DataType dt = a.dtype;
  const std::size_t es = element_size(dt);
  const std::size_t per = slice_elems(a);
  const std::size_t ns = num_slices(a.count, per);
  const bool root = p == n - 1;
  if (p == 0) {
    for (std::size_t j = 0; j < ns; ++j) {
      const std::size_t off = j * per;
      s.send(real(1), at(a.in, off, dt), std::min(per, a.count - off) * es);
    }
    return;
  }
  const std::size_t slot_size = slot_elems(per, a.count);
  auto* slots = static_cast<std::byte*>(s.scratch(kPipelineSlots * slot_size * es));
  void* acc = root ? a.out : s.scratch(a.count * es);
  std::vector<TaskId> slot_user(kPipelineSlots, kNoTask);
  for (std::size_t j = 0; j < ns; ++j) {
    const std::size_t off = j * per;
    const std::size_t cnt = std::min(per, a.count - off);
    const std::size_t k = j % kPipelineSlots;
    std::byte* slot = slots + k * slot_size * es;
    const TaskId rd = s.recv_reduce(real(p - 1), at(acc, off, dt), at(a.in, off, dt), slot, cnt,
                                    root && a.op == ReduceOp::avg ? n : 0, false, {slot_user[k]});
    slot_user[k] = rd;
    if (!root) {
      s.send(real(p + 1), at(acc, off, dt), cnt * es, {rd});
    }
  }
}

void build_gather(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const std::size_t bytes = a.count * element_size(a.dtype);
  if (r != a.root) {
    s.send(a.root, a.in, bytes);
    return;
  }
  for (int i = 1; i < n; ++i) {
    const int q = mod(r + i, n);
    s.recv(q, at(a.out, static_cast<std::size_t>(q) * a.count, a.dtype), bytes);
  }
  s.copy(at(a.out, static_cast<std::size_t>(r) * a.count, a.dtype), a.in, bytes);
}

void build_scatter(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const std::size_t bytes = a.count * element_size(a.dtype);
  if (r != a.root) {
    s.recv(a.root, a.out, bytes);
    return;
  }
  for (int i = 1; i < n; ++i) {
    const int q = mod(r + i, n);
    s.send(q, at(a.in, static_cast<std::size_t>(q) * a.count, a.dtype), bytes);
  }
  s.copy(a.out, at(a.in, static_cast<std::size_t>(r) * a.count, a.dtype), bytes);
}

AlgorithmRows rooted_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::reduce, AlgorithmId::tree, always, always, true, tree_us, build_tree_reduce},
      {OpType::reduce, AlgorithmId::chain, always, always, false, chain_us, build_chain_reduce},
      {OpType::gather, AlgorithmId::direct, always, always, false, free_of_choice, build_gather},
      {OpType::scatter, AlgorithmId::direct, always, always, false, free_of_choice, build_scatter},
  };
  return kRows;
}

}  // namespace chorus::cpu
