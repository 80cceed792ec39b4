// SPDX-License-Identifier: BSD-3-Clause
// The small-op board (tcp/slot_board.hpp) within one process: a round of publish, ready and
// finish for payloads that share the header's line and for larger ones, and whether waits spin,
// decided from the ranks' affinity masks together (each board is made on a thread pinned as a
// rank would be).
#include <sched.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/transports/shm/shm_segment.hpp"
#include "cpu/transports/shm/slot_board.hpp"

namespace chorus::cpu {
namespace {

constexpr std::size_t kRingBytes = 4096;

// A board segment for `ranks` ranks in anonymous shared memory (what attach_host_segment maps
// from /dev/shm).
std::shared_ptr<ShmSegment> board_segment(int ranks) {
  const std::size_t bytes = ShmSegment::size_for(ranks, kRingBytes, true);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(base != MAP_FAILED);
  return std::make_shared<ShmSegment>(base, bytes, ranks, kRingBytes);
}

// Makes rank `rank`'s board on a thread that may run only on `cpus`, as a rank bound there.
std::unique_ptr<SlotBoard> board_on(const std::shared_ptr<ShmSegment>& segment, int rank, int size,
                                    const std::vector<int>& cpus) {
  std::unique_ptr<SlotBoard> board;
  std::thread maker([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : cpus) {
      CPU_SET(cpu, &set);
    }
    REQUIRE(::sched_setaffinity(0, sizeof(set), &set) == 0);
    board = std::make_unique<SlotBoard>(segment, rank, size);
  });
  maker.join();
  return board;
}

// Two CPUs this process may use, or none.
std::vector<int> two_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof(set), &set) == 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &set)) {
      cpus.push_back(cpu);
    }
  }
  return cpus.size() == 2 ? cpus : std::vector<int>{};
}

OpSignature allreduce_sig(std::uint64_t seq, std::size_t count) {
  OpSignature sig;
  sig.kind = OpType::allreduce;
  sig.seq = seq;
  sig.dtype = DataType::float32;
  sig.count = count;
  sig.redop = ReduceOp::sum;
  return sig;
}

}  // namespace

TEST_CASE("board waits spin when the ranks' CPUs together are enough, bound or not", "[board]") {
  const std::vector<int> cpus = two_cpus();
  if (cpus.empty()) {
    WARN("this process may use fewer than two CPUs: nothing to bind apart");
    return;
  }
  SECTION("each rank bound to a CPU of its own: they spin (one CPU each is enough)") {
    auto segment = board_segment(2);
    auto rank0 = board_on(segment, 0, 2, {cpus[0]});
    // Rank 1 has not made its board: rank 0 knows only its own single CPU, and yields.
    REQUIRE_FALSE(rank0->spins());
    auto rank1 = board_on(segment, 1, 2, {cpus[1]});
    REQUIRE(rank0->spins());
    REQUIRE(rank1->spins());
  }
  // Every rank's board made, each on the CPUs given: which ranks' waits spin.
  auto spinning = [](const std::vector<std::vector<int>>& cpus_of) {
    const int n = static_cast<int>(cpus_of.size());
    auto segment = board_segment(n);
    std::vector<std::unique_ptr<SlotBoard>> boards;
    for (int r = 0; r < n; ++r) {
      boards.push_back(board_on(segment, r, n, cpus_of[static_cast<std::size_t>(r)]));
    }
    std::vector<bool> spins;
    for (const auto& board : boards) {
      spins.push_back(board->spins());
    }
    return spins;
  };
  SECTION("two ranks bound to one CPU: neither spins") {
    REQUIRE(spinning({{cpus[0]}, {cpus[0]}}) == std::vector<bool>{false, false});
  }
  SECTION("three ranks on two CPUs: none spins") {
    REQUIRE(spinning({cpus, cpus, {cpus[1]}}) == std::vector<bool>{false, false, false});
  }
  SECTION("two unbound ranks on two CPUs: they spin") {
    REQUIRE(spinning({cpus, cpus}) == std::vector<bool>{true, true});
  }
}

TEST_CASE("a board round reduces payloads in the header's line and past it", "[board]") {
  // 2 floats share the header's line with the signature; 1000 start on the line after it.
  for (std::size_t count : {std::size_t{2}, std::size_t{1000}}) {
    CAPTURE(count);
    auto segment = board_segment(2);
    SlotBoard rank0(segment, 0, 2);
    SlotBoard rank1(segment, 1, 2);
    for (std::uint64_t seq = 1; seq <= 3; ++seq) {  // both buffers, then the first again
      CAPTURE(seq);
      std::vector<float> in0(count), in1(count), out0(count, -1.0f), out1(count, -1.0f);
      for (std::size_t i = 0; i < count; ++i) {
        in0[i] = static_cast<float>(i + seq);
        in1[i] = 1000.0f * static_cast<float>(seq);
      }
      const OpSignature sig = allreduce_sig(seq, count);
      const std::size_t bytes = count * sizeof(float);
      std::optional<SlotBoard::Mismatch> mismatch;
      rank0.publish(sig, in0.data(), bytes);
      REQUIRE_FALSE(rank0.ready(sig, mismatch));  // rank 1 has not published
      REQUIRE_FALSE(mismatch);
      rank1.publish(sig, in1.data(), bytes);
      REQUIRE(rank0.ready(sig, mismatch));
      REQUIRE(rank1.ready(sig, mismatch));
      rank0.finish(out0.data(), count, DataType::float32, ReduceOp::sum);
      rank1.finish(out1.data(), count, DataType::float32, ReduceOp::sum);
      for (std::size_t i = 0; i < count; ++i) {
        REQUIRE(out0[i] == in0[i] + in1[i]);
      }
      REQUIRE(std::memcmp(out0.data(), out1.data(), bytes) == 0);
    }
  }
}

}  // namespace chorus::cpu
