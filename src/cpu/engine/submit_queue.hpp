// SPDX-License-Identifier: BSD-3-Clause
// SubmitQueue: what user threads hand to the engine's loop (ops, an abort request, the highest
// collective issued), and the group's failure as those threads see it. One of the engine's two
// concurrency protocols; the other, who runs the loop, is LoopRunner's (loop_runner.hpp).
//
// Who calls what:
// - Any thread: push() an op, failure(). A thread holding the group's issue lock: note_issued().
// - A thread other than the loop's: post_abort(), then wait_abort_answered() (after waking the
//   loop), until the loop has acted on it or the engine shut down.
// - "The loop": whichever thread runs the engine's loop now (the engine thread, or a caller
//   driving it; loop_runner.hpp): take(), fail(), drain(), answer_abort(), issued().
// - The engine's destructor: close().
//
// Invariants:
// - mu_ guards ops_, abort_request_, abort_answered_, closed_ and failure_; cv_ (with mu_) wakes
//   the waiters of an abort.
// - Once fail() has set failure_, push() queues nothing more (it hands the failure back to the
//   caller, who completes its op with it): the loop's drain() after fail() therefore sees the
//   last op ever queued.
// - has_failed_ is set (release) under mu_ together with failure_ and never cleared: failure()
//   reads it (acquire) without the lock, so a healthy group's inline small ops take no lock, and
//   takes mu_ only to copy failure_ once it is set.
// - issued_seq_ only grows. Its writers hold the group's issue lock and so take turns: a relaxed
//   load and store do (no locked instruction on every op). The loop reads it (status replies,
//   the goodbye) with the default order.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/engine/op.hpp"

namespace chorus::cpu {

class SubmitQueue {
 public:
  // A thread holding the group's issue lock: collective `seq` was issued.
  void note_issued(std::uint64_t seq) noexcept {
    if (issued_seq_.load(std::memory_order_relaxed) < seq) {
      issued_seq_.store(seq, std::memory_order_relaxed);
    }
  }
  // The highest collective seq issued (status replies tell peers; the goodbye carries it).
  std::uint64_t issued() const noexcept { return issued_seq_.load(); }

  // Any thread: queues `op` (moving it) and returns null; or, once the group failed, leaves
  // `op` with the caller and returns the failure (the caller completes the op with it).
  std::exception_ptr push(std::unique_ptr<Op>& op);
  // The loop: swaps the queued ops into `ops` (empty: its memory goes back to the submitters;
  // vectors, not deques, so the two swap back and forth without allocating) and takes the
  // pending abort request (null: none). Call answer_abort() once a request taken is acted on.
  std::exception_ptr take(std::vector<std::unique_ptr<Op>>& ops);

  // A thread other than the loop's: asks the loop to fail the group with `error`.
  void post_abort(std::exception_ptr error);
  // Waits, at most `bound`, until the loop answered (answer_abort()) or the queue was closed.
  void wait_abort_answered(Duration bound);
  // The loop: the abort request it took was acted on, or the engine shut down (no loop any
  // more to take one): releases the waiters.
  void answer_abort();
  // The engine's destructor: abort waiters stop waiting (with shutdown's answer_abort()).
  void close();

  // The loop: the group failed with `error` (the first failure; set once).
  void fail(std::exception_ptr error);
  // The loop, after fail() or at shutdown: moves every queued op into `into`.
  void drain(std::vector<std::unique_ptr<Op>>& into);
  // Any thread: the group's failure, or null. Inline: the caller's small-op path asks while it
  // waits for its peers.
  std::exception_ptr failure() const {
    if (!has_failed_.load(std::memory_order_acquire)) {
      return nullptr;
    }
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Op>> ops_;  // guarded by mu_
  std::exception_ptr abort_request_;      // guarded by mu_
  bool abort_answered_ = false;           // guarded by mu_
  bool closed_ = false;                   // guarded by mu_
  std::exception_ptr failure_;            // guarded by mu_
  std::atomic<bool> has_failed_{false};   // failure_ is set (see the invariants)
  std::atomic<std::uint64_t> issued_seq_{0};
};

}  // namespace chorus::cpu
