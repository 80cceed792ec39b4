// SPDX-License-Identifier: BSD-3-Clause
// NcclComm: owns one ncclComm_t created non-blocking, so that init, enqueue, split and shutdown
// all poll against a deadline and can be aborted instead of hanging.
#pragma once

#include "core/private.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nccl.h>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>

namespace chorus::nccl {

// Backoff for polling loops: spins first (ops usually finish within microseconds), then
// sleeps up to 1 ms so that a long wait does not burn a core.
class PollBackoff {
 public:
  void pause() noexcept;

 private:
  int round_ = 0;
};

// Thread-safety: NCCL calls on the communicator (collectives, split, finalize) are made by one
// thread at a time under the owning group's issue lock; async_error() and abort() may be called
// from any thread (the watchdog) and are serialized here by mu_.
class NcclComm {
 public:
  // Creates rank `rank` of `size` on `device` (made current for the call) with a non-blocking
  // config and polls until it is ready. Past `deadline` it aborts the half-built communicator
  // and calls on_timeout(), which throws (TimeoutError); an NCCL failure is a BackendError.
  static std::shared_ptr<NcclComm> init(const ncclUniqueId& id, int rank, int size, int device,
                                        Deadline deadline, const ErrorContext& context,
                                        const std::function<void()>& on_timeout);

  NcclComm(ncclComm_t comm, int device) noexcept : comm_(comm), device_(device) {}
  // Aborts the communicator unless shutdown() or abort() already released it.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // The handle, for NCCL calls made under the group's issue lock.
  ncclComm_t get() const noexcept { return comm_; }
  int device() const noexcept { return device_; }

  // Polls ncclCommGetAsyncError until the communicator has no call in progress (non-blocking
  // NCCL calls may return before they are enqueued). Throws TimeoutError past the deadline
  // (`what` says what was awaited) or BackendError with NCCL's text. Does not abort.
  void wait_ready(Deadline deadline, const ErrorContext& context, const char* what);

  // ncclSuccess, ncclInProgress or the asynchronous error; nullopt once aborted or destroyed, or
  // (try_only) while another thread holds the communicator (aborting it).
  std::optional<ncclResult_t> async_error(bool try_only = false) noexcept;
  // ncclGetLastError text (may be empty).
  std::string last_error() const;

  // ncclCommAbort: stops NCCL's kernels and proxy threads and frees the communicator. Local,
  // needs no peer. Idempotent; may block while the GPU drains work queued before the abort.
  void abort() noexcept;
  bool aborted() const noexcept;

  // Orderly release: ncclCommFinalize, polled until `deadline`, then ncclCommDestroy; falls back
  // to abort() on any failure or past the deadline. Idempotent.
  void shutdown(Deadline deadline) noexcept;

  // ncclCommSplit (collective over this communicator). Returns nullptr for
  // color == NCCL_SPLIT_NOCOLOR. The new communicator is non-blocking and ready on return.
  std::shared_ptr<NcclComm> split(int color, int key, Deadline deadline,
                                  const ErrorContext& context);

 private:
  enum class State { live, aborted, destroyed };

  ncclComm_t comm_;
  int device_;
  mutable std::mutex mu_;
  State state_ = State::live;  // guarded by mu_
};

}  // namespace chorus::nccl
