// SPDX-License-Identifier: BSD-3-Clause
// TscScale on made-up counters (learning the rate, windows, brackets, a counter that goes back
// or disagrees), and tsc_now() against the steady clock on this machine, from several threads.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/tsc_clock.hpp"

namespace chorus {
namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kBoot = 5'000 * kMs;  // steady time of the first anchor

// A counter ticking at 3 GHz: 3 ticks per ns from kBoot on.
std::uint64_t tsc_at(std::int64_t ns) {
  return static_cast<std::uint64_t>(ns - kBoot) * 3 + 1'000'000;
}

// Anchors at `ns` with a tight bracket, as tsc_now() would.
void anchor_at(TscScale& scale, std::int64_t ns, std::uint64_t tsc) {
  scale.anchor(tsc, ns - 20, ns + 20);
}

TEST_CASE("TscScale learns the rate after the first span and converts within a window") {
  TscScale scale;
  CHECK(scale.wants_anchor(kBoot));
  anchor_at(scale, kBoot, tsc_at(kBoot));
  CHECK_FALSE(scale.calibrated());
  CHECK_FALSE(scale.convert(tsc_at(kBoot + 100)));  // no rate yet

  // Before the learning span has passed the first anchor stays (it is the baseline).
  CHECK_FALSE(scale.wants_anchor(kBoot + TscScale::kLearnNs / 2));
  anchor_at(scale, kBoot + TscScale::kLearnNs / 2, tsc_at(kBoot + TscScale::kLearnNs / 2));
  CHECK_FALSE(scale.calibrated());

  const std::int64_t second = kBoot + TscScale::kLearnNs;
  CHECK(scale.wants_anchor(second));
  anchor_at(scale, second, tsc_at(second));
  REQUIRE(scale.calibrated());
  for (const std::int64_t later : {std::int64_t{0}, std::int64_t{1}, 3 * kMs, 9 * kMs}) {
    const auto ns = scale.convert(tsc_at(second + later));
    REQUIRE(ns);
    CHECK(std::abs(*ns - (second + later)) <= 2);
  }
  // A window or more past the anchor, or before it: the anchor cannot say.
  CHECK_FALSE(scale.convert(tsc_at(second + TscScale::kWindowNs + kMs)));
  CHECK_FALSE(scale.convert(tsc_at(second) - 1));
  CHECK_FALSE(scale.wants_anchor(second + TscScale::kWindowNs / 2));
  CHECK(scale.wants_anchor(second + TscScale::kWindowNs));
}

TEST_CASE("TscScale follows a steady clock that runs at another rate than first learnt") {
  TscScale scale;
  anchor_at(scale, kBoot, tsc_at(kBoot));
  anchor_at(scale, kBoot + TscScale::kLearnNs, tsc_at(kBoot + TscScale::kLearnNs));
  REQUIRE(scale.calibrated());
  // From here on the steady clock runs 400 ppm fast against the counter (NTP slewing it): each
  // window's anchor learns the new rate, so conversions stay within a few ns of it.
  std::int64_t ns = kBoot + TscScale::kLearnNs;
  std::uint64_t tsc = tsc_at(ns);
  for (int window = 0; window < 5; ++window) {
    const std::uint64_t ticks = 3 * static_cast<std::uint64_t>(TscScale::kWindowNs);
    tsc += ticks;
    ns += TscScale::kWindowNs + TscScale::kWindowNs * 4 / 10'000;
    REQUIRE(scale.wants_anchor(ns));
    anchor_at(scale, ns, tsc);
    REQUIRE(scale.calibrated());
  }
  const auto half = scale.convert(tsc + 3 * static_cast<std::uint64_t>(TscScale::kWindowNs / 2));
  REQUIRE(half);
  const std::int64_t expected = ns + (TscScale::kWindowNs / 2) * 10'004 / 10'000;
  CHECK(std::abs(*half - expected) <= 5);
}

TEST_CASE("TscScale ignores a reading whose steady bracket is wide (a preempted reader)") {
  TscScale scale;
  anchor_at(scale, kBoot, tsc_at(kBoot));
  const std::int64_t later = kBoot + TscScale::kLearnNs;
  scale.anchor(tsc_at(later), later - TscScale::kMaxBracketNs, later + 1);
  CHECK_FALSE(scale.calibrated());
  scale.anchor(tsc_at(later), later + 1, later);  // a bracket that goes back
  CHECK_FALSE(scale.calibrated());
  anchor_at(scale, later, tsc_at(later));
  CHECK(scale.calibrated());
}

TEST_CASE("TscScale starts over when the counter goes back") {
  TscScale scale;
  anchor_at(scale, kBoot, tsc_at(kBoot));
  anchor_at(scale, kBoot + TscScale::kLearnNs, tsc_at(kBoot + TscScale::kLearnNs));
  REQUIRE(scale.calibrated());
  const std::int64_t ns = kBoot + TscScale::kLearnNs + TscScale::kWindowNs;
  anchor_at(scale, ns, tsc_at(kBoot) - 100);
  CHECK_FALSE(scale.calibrated());
  CHECK_FALSE(scale.given_up());
  CHECK_FALSE(scale.convert(tsc_at(kBoot)));
  // It learns again from the new anchor.
  anchor_at(scale, ns + TscScale::kLearnNs, tsc_at(kBoot) - 100 + 3 * TscScale::kLearnNs);
  CHECK(scale.calibrated());
}

TEST_CASE("TscScale gives up on a counter that disagrees with the steady clock") {
  TscScale scale;
  anchor_at(scale, kBoot, tsc_at(kBoot));
  std::int64_t ns = kBoot + TscScale::kLearnNs;
  anchor_at(scale, ns, tsc_at(ns));
  REQUIRE(scale.calibrated());
  SECTION("by more than the allowed error over a window") {
    // The counter ran twice as fast for a window: 10 ms off.
    ns += TscScale::kWindowNs;
    anchor_at(scale, ns, tsc_at(ns) + 3 * static_cast<std::uint64_t>(TscScale::kWindowNs));
  }
  SECTION("by not moving at all") {
    ns += TscScale::kWindowNs;
    anchor_at(scale, ns, tsc_at(kBoot + TscScale::kLearnNs));
  }
  CHECK(scale.given_up());
  CHECK_FALSE(scale.calibrated());
  CHECK_FALSE(scale.wants_anchor(ns + TscScale::kWindowNs));
  CHECK_FALSE(scale.convert(tsc_at(ns)));
}

TEST_CASE("TscScale keeps an error within the allowance: slewed, not given up") {
  TscScale scale;
  anchor_at(scale, kBoot, tsc_at(kBoot));
  std::int64_t ns = kBoot + TscScale::kLearnNs;
  anchor_at(scale, ns, tsc_at(ns));
  // 100 µs off over one window (10,000 ppm: far more than NTP slews, within the allowance).
  ns += TscScale::kWindowNs + 100'000;
  anchor_at(scale, ns, tsc_at(ns - 100'000));
  CHECK_FALSE(scale.given_up());
  CHECK(scale.calibrated());
}

// tsc_now() bracketed by two steady reads close together must lie between them, give or take
// the conversion's error.
void check_against_steady(int reads, std::atomic<int>& bad) {
  constexpr auto kTolerance = std::chrono::microseconds(50);
  for (int i = 0; i < reads; ++i) {
    const auto before = Clock::now();
    const auto t = tsc_now();
    const auto after = Clock::now();
    if (after - before > std::chrono::microseconds(5)) {
      continue;  // preempted between the reads: nothing to compare
    }
    if (t < before - kTolerance || t > after + kTolerance) {
      bad.fetch_add(1);
    }
  }
}

TEST_CASE("tsc_now() agrees with the steady clock, from several threads across windows") {
  // The conditions for the TSC are the machine's; where they hold, the rate is learnt within a
  // few milliseconds of calls (a bound of a second, for a loaded machine).
  INFO("TSC usable here: " << tsc_clock_usable());
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  while (tsc_clock_usable() && !tsc_clock_calibrated() && Clock::now() < give_up) {
    (void)tsc_now();
  }
  CHECK(tsc_clock_calibrated() == tsc_clock_usable());

  // 4 threads, each reading for several windows (a read is 10-100 ns: 400,000 reads span at
  // least a few windows of 10 ms, and each thread crosses anchors the others made).
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&bad] { check_against_steady(400'000, bad); });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(bad.load() == 0);
  CHECK(tsc_clock_calibrated() == tsc_clock_usable());
}

}  // namespace
}  // namespace chorus
