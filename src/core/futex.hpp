// SPDX-License-Identifier: BSD-3-Clause
// Futex wait and wake on a 32-bit word, shared between processes or not (not FUTEX_PRIVATE:
// the shared-memory transport's words live in a mapping of several processes). In core, not in
// a transport: the cpu engine parks its thread on one too.
#pragma once

#include "core/private.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace chorus {

// Sleeps while `word` holds `expected`, at most `timeout` (or until a wake; spurious returns
// are possible: callers look again).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout) noexcept {
  const auto ns = timeout.count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

// Wakes every sleeper on `word`.
inline void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

}  // namespace chorus
