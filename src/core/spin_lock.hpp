// SPDX-License-Identifier: BSD-3-Clause
// SpinLock: a lock for short critical sections on the per-op path (the flight recorder). Taking
// it is one atomic exchange and releasing it one plain store; a pthread mutex costs two locked
// instructions and some sixty more, which an 8-byte op pays on every record. Waiters spin for a
// moment, then yield their CPU: a holder may be descheduled (4 ranks on 2 cores), and a snapshot
// for a dump holds the lock while it copies the whole ring.
#pragma once

#include "core/private.hpp"

#include <sched.h>

#include <atomic>

namespace chorus {

class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      // Wait with plain loads: spinning on the exchange would move the line between the
      // waiters on every try.
      for (int tries = 0; locked_.load(std::memory_order_relaxed); ++tries) {
        if (tries < kSpins) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          ::sched_yield();
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpins = 64;  // a few microseconds of pause before yielding
  std::atomic<bool> locked_{false};
};

}  // namespace chorus
