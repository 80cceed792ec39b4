// SPDX-License-Identifier: BSD-3-Clause
#include "core/tsc_clock.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace chorus {

namespace {
__extension__ using Wide = unsigned __int128;  // GCC and Clang on 64-bit targets
}  // namespace

std::optional<std::int64_t> TscScale::convert(std::uint64_t tsc) const noexcept {
  const std::uint64_t before = seq_.load(std::memory_order_acquire);
  if ((before & 1) != 0) {
    return std::nullopt;
  }
  const std::uint64_t at = tsc_.load(std::memory_order_relaxed);
  const std::int64_t ns = ns_.load(std::memory_order_relaxed);
  const std::uint64_t rate = ns_per_tick_.load(std::memory_order_relaxed);
  const std::uint64_t window = window_ticks_.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (seq_.load(std::memory_order_relaxed) != before) {
    return std::nullopt;
  }
  const std::uint64_t ticks = tsc - at;  // wraps past `window` if tsc < at
  if (rate == 0 || ticks >= window) {
    return std::nullopt;
  }
  // ticks < window, so ticks * rate < kWindowNs << 32: no overflow.
  return ns + static_cast<std::int64_t>((ticks * rate) >> 32);
}

void TscScale::anchor(std::uint64_t tsc, std::int64_t ns_before, std::int64_t ns_after) noexcept {
  if (given_up() || ns_after < ns_before || ns_after - ns_before > kMaxBracketNs) {
    return;
  }
  const std::int64_t ns = ns_before + (ns_after - ns_before) / 2;
  std::uint64_t seq = seq_.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !seq_.compare_exchange_strong(seq, seq + 1, std::memory_order_relaxed)) {
    return;  // another thread is re-anchoring
  }
  std::atomic_thread_fence(std::memory_order_release);  // the odd seq before the fields
  const std::uint64_t old_tsc = tsc_.load(std::memory_order_relaxed);
  const std::int64_t old_ns = ns_.load(std::memory_order_relaxed);
  const std::uint64_t old_rate = ns_per_tick_.load(std::memory_order_relaxed);
  if (old_ns == 0 || tsc < old_tsc) {
    // The first anchor, or the counter went back (it should not): learn the rate afresh.
    tsc_.store(tsc, std::memory_order_relaxed);
    ns_.store(ns, std::memory_order_relaxed);
    ns_per_tick_.store(0, std::memory_order_relaxed);
    window_ticks_.store(0, std::memory_order_relaxed);
  } else if (ns - old_ns >= (old_rate == 0 ? kLearnNs : kWindowNs)) {
    const std::uint64_t ticks = tsc - old_tsc;
    const auto elapsed = static_cast<std::uint64_t>(ns - old_ns);
    bool trusted = ticks != 0;
    if (trusted && old_rate != 0) {
      const auto predicted =
          old_ns + static_cast<std::int64_t>((static_cast<Wide>(ticks) * old_rate) >> 32);
      const std::int64_t error = predicted > ns ? predicted - ns : ns - predicted;
      trusted = error <= kMaxErrorNs + static_cast<std::int64_t>(elapsed / 1000);
    }
    const Wide rate = trusted ? (static_cast<Wide>(elapsed) << 32) / ticks : 0;
    // A rate outside 1/1024..1024 ns per tick is no TSC worth trusting either.
    if (rate < (Wide{1} << 22) || rate > (Wide{1} << 42)) {
      given_up_.store(true, std::memory_order_relaxed);
      ns_per_tick_.store(0, std::memory_order_relaxed);
    } else {
      tsc_.store(tsc, std::memory_order_relaxed);
      ns_.store(ns, std::memory_order_relaxed);
      ns_per_tick_.store(static_cast<std::uint64_t>(rate), std::memory_order_relaxed);
      window_ticks_.store(static_cast<std::uint64_t>((static_cast<Wide>(kWindowNs) << 32) / rate),
                          std::memory_order_relaxed);
    }
  }
  // else: less than a window since the anchor; it stays, the baseline for the rate.
  seq_.store(seq + 2, std::memory_order_release);
}

bool TscScale::wants_anchor(std::int64_t ns) const noexcept {
  if (given_up()) {
    return false;
  }
  const std::int64_t at = ns_.load(std::memory_order_relaxed);
  const bool learning = ns_per_tick_.load(std::memory_order_relaxed) == 0;
  return at == 0 || ns - at >= (learning ? kLearnNs : kWindowNs);
}

bool TscScale::calibrated() const noexcept {
  return !given_up() && ns_per_tick_.load(std::memory_order_relaxed) != 0;
}

namespace {

// Whether the kernel's current clocksource is the TSC.
bool clocksource_is_tsc() noexcept {
  std::FILE* f =
      std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (f == nullptr) {
    return false;
  }
  char line[64] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  return read && std::strcmp(line, "tsc\n") == 0;
}

// Whether a /proc/cpuinfo flags line holds `flag` as a whole word.
bool has_flag(const char* line, const char* flag) noexcept {
  const std::size_t n = std::strlen(flag);
  for (const char* at = std::strstr(line, flag); at != nullptr; at = std::strstr(at + 1, flag)) {
    const char after = at[n];
    if (at > line && at[-1] == ' ' && (after == ' ' || after == '\n' || after == '\0')) {
      return true;
    }
  }
  return false;
}

bool cpu_flags_have_invariant_tsc() noexcept {
  std::FILE* f = std::fopen("/proc/cpuinfo", "re");
  if (f == nullptr) {
    return false;
  }
  // The flags line is longer than any fixed buffer is sure to hold; getline grows its own.
  char* line = nullptr;
  std::size_t cap = 0;
  bool invariant = false;
  while (::getline(&line, &cap, f) > 0) {
    if (std::strncmp(line, "flags", 5) == 0) {
      invariant = has_flag(line, "constant_tsc") && has_flag(line, "nonstop_tsc");
      break;
    }
  }
  std::free(line);
  std::fclose(f);
  return invariant;
}

bool tsc_is_the_clocksource() noexcept {
#if defined(__x86_64__)
  return clocksource_is_tsc() && cpu_flags_have_invariant_tsc();
#else
  return false;
#endif
}

struct TscClock {
  const bool usable = tsc_is_the_clocksource();
  TscScale scale;
};

TscClock& tsc_clock() noexcept {
  static TscClock clock;
  return clock;
}

std::int64_t steady_ns(Clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

Clock::time_point tsc_now() noexcept {
#if defined(__x86_64__)
  TscClock& clock = tsc_clock();
  if (!clock.usable) {
    return Clock::now();
  }
  if (clock.scale.calibrated()) {
    if (const auto ns = clock.scale.convert(__rdtsc())) {
      return Clock::time_point(
          std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(*ns)));
    }
  }
  // Past the anchor's window, or still learning the rate: one steady read, and two more for an
  // anchor when one would take effect.
  const auto before = Clock::now();
  if (!clock.scale.wants_anchor(steady_ns(before))) {
    return before;
  }
  const std::uint64_t tsc = __rdtsc();
  const auto after = Clock::now();
  clock.scale.anchor(tsc, steady_ns(before), steady_ns(after));
  return after;
#else
  return Clock::now();
#endif
}

bool tsc_clock_usable() noexcept { return tsc_clock().usable; }

bool tsc_clock_calibrated() noexcept { return tsc_clock().scale.calibrated(); }

}  // namespace chorus
