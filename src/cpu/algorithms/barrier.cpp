// SPDX-License-Identifier: BSD-3-Clause
// Dissemination barrier: in round k (2^k < n) rank r sends a one-byte token to r + 2^k and
// receives one from r - 2^k; a round's send waits for every earlier round's receive. After
// ceil(log2 n) rounds every rank has heard, directly or transitively, from every other, so
// nobody leaves before everybody arrived. (The op's signature headers ride along, so a rank
// that called something else instead is named.)
#include <vector>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {

void build_barrier(Schedule& s, const CollectiveArgs&) {
  const int n = s.size();
  const int r = s.rank();
  static const std::byte kToken{1};
  int rounds = 0;
  while ((1 << rounds) < n) {
    ++rounds;
  }
  auto* sink = static_cast<std::byte*>(s.scratch(static_cast<std::size_t>(rounds) + 1));
  std::vector<TaskId> heard;
  for (int k = 0; k < rounds; ++k) {
    const int d = 1 << k;
    const TaskId sd = s.send(mod(r + d, n), &kToken, 1);
    for (TaskId h : heard) {
      s.depend(sd, h);
    }
    heard.push_back(s.recv(mod(r - d, n), sink + k, 1));
  }
}

AlgorithmRows barrier_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::barrier, AlgorithmId::dissemination, always, always, false, free_of_choice,
       build_barrier},
  };
  return kRows;
}

}  // namespace chorus::cpu
