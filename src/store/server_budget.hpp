// SPDX-License-Identifier: BSD-3-Clause
// MemoryBudget: the store server's accounting of the bytes clients make it hold
// (docs/protocol.md §5). Each connection's footprint (input buffer, unread replies, parked
// requests) is charged to one global total; a reply is served only when the connection's unread
// replies and the total allow it, with a small per-connection reserve so that a good client's
// ping is answered while strangers hold the budget. Connections refused for the global total
// wait here until it frees; released heap goes back to the OS (malloc_trim) in large steps.
//
// Separate from the server because it is pure bookkeeping (numbers and connection ids, no
// sockets): the server asks it, and decides what to do with the answer.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <set>

namespace chorus::store {

class MemoryBudget {
 public:
  // Small replies up to this much per connection are served even when the global budget is
  // spent, so that a good client's ping is answered while strangers hold the budget.
  static constexpr std::size_t kConnectionReserve = 64u << 10;

  // max_buffered: all connections together; max_unread_reply: one connection's unread replies.
  MemoryBudget(std::size_t max_buffered, std::size_t max_unread_reply) noexcept
      : max_buffered_(max_buffered), max_unread_reply_(max_unread_reply) {}

  enum class Afford { yes, connection_full, server_full };
  // Whether a connection with `unread` bytes held for it (`out_pending` of them unsent
  // replies) may take a reply costing `cost`.
  Afford afford(std::size_t unread, std::size_t out_pending, std::size_t cost) const noexcept;
  // The global total has no room left for input.
  bool full() const noexcept { return buffered_ >= max_buffered_; }

  // A connection's footprint is now `now` bytes; `accounted` is its share of the total.
  void charge(std::size_t& accounted, std::size_t now) noexcept;
  // Connection `conn` closes: its share is freed and it waits no more.
  void release(std::uint64_t conn, std::size_t accounted);
  // Returns freed heap to the OS once enough was freed since the last time.
  void trim_if_due() noexcept;

  // Connection `conn` was refused for the global total (a reply costing `cost`): it waits until
  // the total has room for that.
  void wait(std::uint64_t conn, std::size_t cost);
  void stop_waiting(std::uint64_t conn) { waiters_.erase(conn); }
  bool waiting(std::uint64_t conn) const { return waiters_.count(conn) != 0; }
  // There are waiters and the total is low enough to wake them.
  bool should_wake() const noexcept { return !waiters_.empty() && buffered_ <= wake_level_; }
  // The waiters, to be served again (those that block again wait anew).
  std::set<std::uint64_t> take_waiters();

 private:
  // Released heap is returned to the OS (malloc_trim) after this much was freed.
  static constexpr std::size_t kTrimAfterFreed = 32u << 20;

  std::size_t max_buffered_;
  std::size_t max_unread_reply_;
  std::size_t buffered_ = 0;         // sum of the connections' shares
  std::set<std::uint64_t> waiters_;  // connections blocked on the global total
  std::size_t wake_level_ = 0;       // wake the waiters once buffered_ is this low
  std::size_t freed_since_trim_ = 0;
};

}  // namespace chorus::store
