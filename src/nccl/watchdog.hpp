// SPDX-License-Identifier: BSD-3-Clause
// Watchdog: one thread per NCCL group that completes Works when their events fire, enforces
// each op's deadline, polls ncclCommGetAsyncError, and on the first failure poisons the group,
// fails every pending Work and aborts the communicator.
#pragma once

#include "core/private.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <chorus/errors.hpp>

#include "nccl/nccl_comm.hpp"
#include "nccl/nccl_work.hpp"

namespace chorus::nccl {

class Watchdog {
 public:
  // on_failure runs once, on the thread that finds the first failure, before any Work is
  // failed: the group records it so that later calls fail fast. abort_comm runs once on the
  // watchdog thread after the Works were failed (it may block while the GPU drains).
  Watchdog(std::shared_ptr<NcclComm> comm, int device, ErrorContext group_context,
           std::function<void(std::exception_ptr)> on_failure, std::function<void()> abort_comm);
  // Stops the thread. Pending Works are failed first (call drain() before for an orderly end).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts watching `work`. If the group already failed, fails it at once.
  void track(std::shared_ptr<NcclWork> work);
  // Fails the group with `root` (first failure wins): on_failure, every pending Work failed
  // naming itself and the root cause, then the communicator aborted by the watchdog thread.
  // Thread-safe; never blocks on the GPU. Returns false if the group had already failed.
  bool poison(std::exception_ptr root);
  // Blocks until no Work is pending (each completes or fails by its deadline).
  void drain();
  // True once the communicator abort requested by a failure has returned; waits up to `bound`.
  bool wait_comm_aborted(Duration bound);
  std::size_t pending() const;

 private:
  void run() noexcept;
  // One round: returns the failure found, if any.
  std::exception_ptr poll_once();
  std::exception_ptr make_timeout(const NcclWork& work) const;
  std::exception_ptr make_async_error(ncclResult_t result, const NcclWork* oldest) const;
  std::exception_ptr make_event_error(cudaError_t result, const NcclWork& work) const;

  std::shared_ptr<NcclComm> comm_;
  int device_;
  ErrorContext group_context_;
  std::function<void(std::exception_ptr)> on_failure_;
  std::function<void()> abort_comm_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<NcclWork>> pending_;  // guarded by mu_; issue order
  std::exception_ptr failure_;                     // guarded by mu_; the root cause
  bool abort_requested_ = false;                   // guarded by mu_
  bool comm_aborted_ = false;                      // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  std::thread thread_;                             // last: starts after the members above
};

}  // namespace chorus::nccl
