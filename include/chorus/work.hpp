// SPDX-License-Identifier: BSD-3-Clause
// Work: the handle of one op in flight.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>

namespace chorus {

// Two timeouts, never confused: the op's deadline (its options; enforced by the backend; fatal
// to the group) and wait_for()'s bound (harmless to the op). All methods are thread-safe.
class CHORUS_API Work {
 public:
  virtual ~Work();

  // Blocks until the op is done; rethrows its error. For the nccl backend it instead makes the
  // caller's stream wait for the op (no host block) and throws only if the op already failed.
  virtual void wait() = 0;
  // Blocks the host until the op is done (ok or failed) and rethrows its error. Same as wait()
  // for CPU backends.
  virtual void synchronize() { wait(); }
  // True if the op is done (ok or failed) within `bound`; false if it is still running.
  // Never throws the op's error and never aborts the op.
  virtual bool wait_for(Duration bound) = 0;
  virtual bool is_completed() const noexcept = 0;
  // True if the op completed without error.
  virtual bool is_success() const noexcept = 0;
  // The op's error; null while running or after success.
  virtual std::exception_ptr exception() const = 0;
  // Runs fn exactly once when the op completes: on the group's callback thread (one per group,
  // started by the first callback; it runs callbacks one at a time, in the order their ops
  // completed), or inline on the calling thread if the op is already done. Never on a thread
  // waiting for the op in wait(), whose return never waits for a callback. Never on the thread that
  // runs the group's ops and watches its peers: fn may block, sleep or wait on another op of the
  // group, and that delays only the callbacks queued behind it, never liveness or other ops. (A
  // callback that waits for a later callback of the same group waits for itself.)
  virtual void then(std::function<void(Work&)> fn) = 0;

  virtual const char* op_name() const noexcept = 0;  // "allreduce", "barrier" ...
  virtual std::uint64_t seq() const noexcept = 0;    // sequence number in its group (1-based)
  // For a recv: the rank its message came from, once it completed successfully (how a recv
  // from kAnySource learns its sender). -1 for other ops and before then.
  virtual int source_rank() const noexcept { return -1; }
};

}  // namespace chorus
