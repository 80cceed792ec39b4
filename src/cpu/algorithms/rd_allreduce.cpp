// SPDX-License-Identifier: BSD-3-Clause
// Recursive-doubling allreduce, for small payloads (latency: log2 n message rounds).
//
// Let p be the largest power of two <= n and rem = n - p. First the 2*rem lowest ranks fold
// in pairs: even rank 2i sends its input to 2i+1 and sits out; odd rank 2i+1 reduces and
// takes virtual rank i. The other ranks take virtual rank r - rem. Then for mask = 1, 2, ..
// < p, virtual ranks v and v^mask exchange their whole partial result and both compute
// lower op higher (same operand order on both sides, hence identical bits). The last round
// divides for avg. Finally each odd folding rank sends the result back to its even partner.
// Each round receives into its own scratch buffer, so there are no slot-reuse waits.
#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_rd_allreduce(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const DataType dt = a.dtype;
  const std::size_t bytes = a.count * element_size(dt);
  const int divisor = a.op == ReduceOp::avg ? n : 0;
  int p = 1;
  while (p * 2 <= n) {
    p *= 2;
  }
  const int rem = n - p;

  // Folding.
  int vr = 0;
  const void* acc = a.in;  // where this rank's partial result lives now
  TaskId acc_ready = kNoTask;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      s.send(r + 1, a.in, bytes);
      s.recv(r + 1, a.out, bytes);
      return;
    }
    void* tmp = s.scratch(bytes);
    const TaskId rv = s.recv(r - 1, tmp, bytes);
    // The partner is the lower rank: its value goes first.
    acc_ready = s.reduce(a.out, tmp, a.in, a.count, 0, {rv});
    acc = a.out;
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };

  for (int mask = 1; mask < p; mask <<= 1) {
    const int vpeer = vr ^ mask;
    const int peer = real(vpeer);
    void* tmp = s.scratch(bytes);
    const TaskId sd = s.send(peer, acc, bytes, {acc_ready});
    const TaskId rv = s.recv(peer, tmp, bytes);
    const int div = (mask << 1) >= p ? divisor : 0;
    // The send reads acc; the reduction may overwrite it (in place) only after it left.
    if (vr < vpeer) {
      acc_ready = s.reduce(a.out, acc, tmp, a.count, div, {sd, rv, acc_ready});
    } else {
      acc_ready = s.reduce(a.out, tmp, acc, a.count, div, {sd, rv, acc_ready});
    }
    acc = a.out;
  }
  if (r < 2 * rem) {
    s.send(r - 1, a.out, bytes, {acc_ready});
  }
}

AlgorithmRows rd_allreduce_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allreduce, AlgorithmId::recursive_doubling, always, always, true,
       recursive_doubling_us, build_rd_allreduce},
  };
  return kRows;
}

}  // namespace chorus::cpu
