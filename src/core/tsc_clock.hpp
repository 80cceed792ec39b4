// SPDX-License-Identifier: BSD-3-Clause
// tsc_now(): the steady clock's time for the per-op path, read from the CPU's time-stamp counter
// where that is as good as the steady clock.
//
// Why: every op reads the clock twice (its issue time, which is also its deadline base, and the
// flight recorder's end stamp). clock_gettime() costs a measurable share of an 8-byte allreduce
// between two ranks over shared memory; rdtsc and a multiply cost less than half as much
// (docs/results.md, "Flight recorder cost").
//
// When: on x86-64, when the kernel's own clocksource is the TSC (it then has checked that the
// counters agree across CPUs) and the CPU says its TSC ticks at a constant rate, in every power
// state (constant_tsc, nonstop_tsc). Elsewhere tsc_now() is Clock::now().
//
// How: a TSC reading converts to steady time from an anchor (a TSC reading and the steady time at
// it) and a rate learnt between the last two anchors. An anchor serves one window (kWindowNs) of
// TSC ticks; the first read past it reads the steady clock and re-anchors, so a conversion never
// extrapolates further than that (the steady clock is slewed by NTP; the TSC is not), and the
// rate follows the steady clock's. Until a rate is known (1 ms after the first call)
// and while another thread re-anchors, reads go to the steady clock. If the TSC ever disagrees
// with the steady clock by more than kMaxErrorNs at a re-anchor, it is not used again.
//
// The result is steady time to within a few microseconds; it is monotonic within one window
// but may step back by that error when the anchor moves. Its uses can take that: deadlines of
// milliseconds and up, and flight-recorder stamps in microseconds (which clamp an end to its
// start).
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include <chorus/deadline.hpp>

namespace chorus {

Clock::time_point tsc_now() noexcept;

// Whether tsc_now() reads the TSC on this machine (the conditions above), and whether it has
// learnt its rate and not given up on it: tsc_now() then reads the TSC on most calls.
bool tsc_clock_usable() noexcept;
bool tsc_clock_calibrated() noexcept;

// The conversion behind tsc_now(), with its inputs passed in (tests drive it with made-up
// counters). Lock-free: convert() from any thread; anchor() from any thread, one at a time
// taking effect (the others return leaving it as it is).
class TscScale {
 public:
  static constexpr std::int64_t kWindowNs = 10'000'000;  // 10 ms of steady time per anchor
  // The first rate is learnt over a shorter span, so that a process reads the TSC soon after its
  // first op; later ones over a window.
  static constexpr std::int64_t kLearnNs = 1'000'000;
  // A reading taken between two steady-clock reads further apart than this is not an anchor
  // (the thread was preempted or the VM paused in between).
  static constexpr std::int64_t kMaxBracketNs = 2'000;
  // At a re-anchor: the conversion's error beyond which the TSC is given up on, plus 1000 ppm of
  // the time since the previous anchor (NTP slews the steady clock by at most 500 ppm).
  static constexpr std::int64_t kMaxErrorNs = 1'000'000;

  // Steady nanoseconds at `tsc`, or nothing when the current anchor cannot say: no rate yet,
  // `tsc` before the anchor or a window or more past it, a re-anchor in progress, given up.
  std::optional<std::int64_t> convert(std::uint64_t tsc) const noexcept;

  // A new anchor: `tsc` read between steady readings `ns_before` and `ns_after`. It replaces the
  // current one once a window (kLearnNs while no rate is known) has passed since it, learning
  // the rate between the two; at once if there is none or the counter went back.
  void anchor(std::uint64_t tsc, std::int64_t ns_before, std::int64_t ns_after) noexcept;

  // Whether anchor() at steady time `ns` would take effect (readers past the anchor's window
  // while the rate is being learnt need not read the clock twice more to find out).
  bool wants_anchor(std::int64_t ns) const noexcept;
  bool calibrated() const noexcept;
  bool given_up() const noexcept { return given_up_.load(std::memory_order_relaxed); }

 private:
  // A seqlock: odd while a thread re-anchors. The fields are atomics so that a reader racing a
  // writer reads stale values (and then discards them), never torn ones.
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> tsc_{0};           // the anchor's TSC reading
  std::atomic<std::int64_t> ns_{0};             // steady ns at it (0: no anchor)
  std::atomic<std::uint64_t> ns_per_tick_{0};   // 32.32 fixed point; 0: no rate yet
  std::atomic<std::uint64_t> window_ticks_{0};  // ticks one anchor serves
  std::atomic<bool> given_up_{false};
};

}  // namespace chorus
