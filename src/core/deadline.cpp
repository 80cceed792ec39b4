// SPDX-License-Identifier: BSD-3-Clause
// Deadline arithmetic: saturating after(), clamped remaining().
#include <chorus/deadline.hpp>

namespace chorus {

Deadline Deadline::after(Duration d) noexcept { return after(d, Clock::now()); }

Deadline Deadline::after(Duration d, Clock::time_point now) noexcept {
  if (d <= Duration::zero()) {
    return Deadline(now);
  }
  const auto headroom = Clock::time_point::max() - now;
  if (std::chrono::duration_cast<Duration>(headroom) <= d) {
    return never();
  }
  return Deadline(now + d);
}

Duration Deadline::remaining() const noexcept {
  if (is_never()) {
    return Duration::max();
  }
  const auto now = Clock::now();
  if (now >= when_) {
    return Duration::zero();
  }
  // Round up so that a positive remainder below 1 ms is not reported as "expired".
  return std::chrono::ceil<Duration>(when_ - now);
}

}  // namespace chorus
