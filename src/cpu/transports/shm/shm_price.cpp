// SPDX-License-Identifier: BSD-3-Clause
// The shared-memory transport's host probe: futex wake-ups between two threads, and memcpy.
#include "cpu/transports/shm/shm_price.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

namespace chorus::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_from(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double middle_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double futex_round_us() {
  constexpr int kTrips = 40;
  std::atomic<int> turn{0};  // odd: the helper's move
  std::thread helper([&] {
    for (int i = 0; i < kTrips; ++i) {
      int seen = turn.load();
      while (seen % 2 == 0) {
        turn.wait(seen);
        seen = turn.load();
      }
      turn.store(seen + 1);
      turn.notify_one();
    }
  });
  std::vector<double> trips;
  for (int i = 0; i < kTrips; ++i) {
    const auto t0 = Clock::now();
    turn.store(2 * i + 1);
    turn.notify_one();
    int seen = turn.load();
    while (seen != 2 * i + 2) {
      turn.wait(seen);
      seen = turn.load();
    }
    trips.push_back(seconds_from(t0));
  }
  helper.join();
  return middle_of(trips) / 2 * 1e6;
}

// The fastest of eight copies of 1 MiB (the machine is shared: the least disturbed one).
double copy_gbps() {
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<std::byte> a(kBytes, std::byte{1}), b(kBytes);
  double best = 1e9;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), kBytes);
    best = std::min(best, seconds_from(t0));
  }
  return kBytes / best / 1e9;
}

}  // namespace

std::optional<LinkCost> measure_shm_rings() {
  // The round trips in batches between the copies, the median batch counting: neither a
  // moment when other work held the CPUs (a wake-up then waits for a time slice, 10x the
  // figure) nor one when the waiting thread never went to sleep (a quarter of it) may set this
  // host's rounds in its cache for good.
  std::vector<double> rounds{futex_round_us()};
  double copy = 0;
  for (int batch = 0; batch < 4; ++batch) {
    copy = std::max(copy, copy_gbps());
    rounds.push_back(futex_round_us());
  }
  return LinkCost{middle_of(rounds), copy / 2};
}

}  // namespace chorus::cpu
