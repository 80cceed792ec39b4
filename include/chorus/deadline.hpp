// SPDX-License-Identifier: BSD-3-Clause
// Duration and Deadline: every blocking call in chorus is bounded by one of these.
#pragma once

#include <chrono>

#include <chorus/export.hpp>

namespace chorus {

using Duration = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// An absolute point on the steady clock. "Forever" has a name (never()), not a number; it is
// used only for internal waits that abort() can wake. after() saturates instead of overflowing.
class CHORUS_API Deadline {
 public:
  static Deadline never() noexcept { return Deadline(Clock::time_point::max()); }
  static Deadline after(Duration d) noexcept;
  // The same from a time the caller has read already (one clock read serves several uses).
  static Deadline after(Duration d, Clock::time_point now) noexcept;
  static Deadline at(Clock::time_point t) noexcept { return Deadline(t); }

  bool is_never() const noexcept { return when_ == Clock::time_point::max(); }
  bool expired() const noexcept { return !is_never() && Clock::now() >= when_; }
  // Time left, clamped at zero; Duration::max() for never().
  Duration remaining() const noexcept;
  Clock::time_point when() const noexcept { return when_; }

  // The earlier of two deadlines.
  friend Deadline earliest(Deadline a, Deadline b) noexcept { return a.when_ < b.when_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point when) noexcept : when_(when) {}
  Clock::time_point when_;
};

}  // namespace chorus
