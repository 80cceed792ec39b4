// SPDX-License-Identifier: BSD-3-Clause
// MemoryBudget: the store server's memory accounting (see server_budget.hpp).
#include "store/server_budget.hpp"

#include <algorithm>

#include <malloc.h>

namespace chorus::store {

MemoryBudget::Afford MemoryBudget::afford(std::size_t unread, std::size_t out_pending,
                                          std::size_t cost) const noexcept {
  if (unread + cost <= kConnectionReserve) {
    return Afford::yes;
  }
  // One reply larger than the per-connection cap is allowed when nothing else is unread (its
  // size is bounded by max_reply_bytes).
  if (out_pending > 0 && unread + cost > max_unread_reply_) {
    return Afford::connection_full;
  }
  if (buffered_ + cost > max_buffered_) {
    return Afford::server_full;
  }
  return Afford::yes;
}

void MemoryBudget::charge(std::size_t& accounted, std::size_t now) noexcept {
  if (now < accounted) {
    freed_since_trim_ += accounted - now;
  }
  buffered_ = buffered_ - accounted + now;
  accounted = now;
}

void MemoryBudget::release(std::uint64_t conn, std::size_t accounted) {
  buffered_ -= accounted;
  freed_since_trim_ += accounted;
  waiters_.erase(conn);
}

void MemoryBudget::trim_if_due() noexcept {
  if (freed_since_trim_ >= kTrimAfterFreed) {
    freed_since_trim_ = 0;
    ::malloc_trim(0);  // hand large freed buffers back to the OS: RSS follows the budget
  }
}

void MemoryBudget::wait(std::uint64_t conn, std::size_t cost) {
  waiters_.insert(conn);
  // Wake the waiters once the budget has room for this one (the cap is at least twice any
  // single reply, so the level is reachable).
  const std::size_t level = max_buffered_ - std::min(cost, max_buffered_ / 2);
  wake_level_ = std::max(wake_level_, level);
}

std::set<std::uint64_t> MemoryBudget::take_waiters() {
  wake_level_ = 0;  // waiters that block again raise it to what they need
  std::set<std::uint64_t> waiters;
  waiters.swap(waiters_);
  return waiters;
}

}  // namespace chorus::store
