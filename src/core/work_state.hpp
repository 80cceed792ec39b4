// SPDX-License-Identifier: BSD-3-Clause
// WorkState: the shared Work implementation. Completes exactly once, with or without an error;
// wakes waiters and runs then() callbacks: on the group's CallbackThread where the backend gave
// one (never on the thread that completed it, which keeps the group alive), else on the
// completing thread.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <chorus/work.hpp>

#include "core/callback_thread.hpp"
#include "core/error_copy.hpp"
#include "core/flight_recorder.hpp"

namespace chorus {

class WorkState;

// A backend that can run its progress loop on a waiting thread (tcp: LoopRunner::drive). Shared by
// the Works that use it, so it may outlive the backend: drive() then returns at once.
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Makes progress on the calling thread until `work` completes, or returns early where it
  // cannot (another thread drives, the backend is shutting down); wait() then blocks as usual.
  virtual void drive(const WorkState& work) noexcept = 0;
};

class WorkState : public Work, public std::enable_shared_from_this<WorkState> {
 public:
  WorkState(const char* op_name, std::uint64_t seq) noexcept : op_name_(op_name), seq_(seq) {}

  // Completes the work (error = nullptr for success). Only the first call has an effect;
  // returns whether this call completed it. Callbacks go to the callback thread (if any, and the
  // Work is owned by a shared_ptr), else run on the calling thread.
  bool complete(std::exception_ptr error = nullptr) noexcept;

  // wait() looks at the op for up to `spin`, yielding the core between looks, before it
  // blocks: a small op completes sooner than a blocked thread wakes on a VM (tens of
  // microseconds). Zero (the default) blocks at once; a backend sets it for its small ops
  // before handing the Work out.
  void spin_before_blocking(std::chrono::microseconds spin) noexcept { wait_spin_ = spin; }
  // wait() first lends its thread to `driver` (not from a then() callback). Set before the Work
  // is handed out.
  void drive_with(std::shared_ptr<WorkDriver> driver) noexcept { driver_ = std::move(driver); }
  bool has_driver() const noexcept { return driver_ != nullptr; }
  // then() callbacks registered before completion run on `thread`. Set before the Work is
  // handed out.
  void run_callbacks_on(std::shared_ptr<CallbackThread> thread) noexcept {
    callback_thread_ = std::move(thread);
  }

  void wait() override;
  bool wait_for(Duration bound) override;
  bool is_completed() const noexcept override;
  bool is_success() const noexcept override;
  std::exception_ptr exception() const override;
  void then(std::function<void(Work&)> fn) override;
  const char* op_name() const noexcept override { return op_name_; }
  std::uint64_t seq() const noexcept override { return seq_; }
  int source_rank() const noexcept override { return source_rank_.load(std::memory_order_acquire); }
  // A recv's sender; set before complete(), which publishes it to waiters.
  void set_source_rank(int rank) noexcept { source_rank_.store(rank, std::memory_order_release); }

  // Notes this op's end in `recorder` (as `record`) when it completes, before waiters wake,
  // so that a dump taken after wait() returned shows it ended. Now if it already has.
  void trace_end_in(std::shared_ptr<FlightRecorder> recorder, std::uint64_t record) noexcept;

  // A Work that is already complete (world size 1, count 0 ...).
  static std::shared_ptr<WorkState> completed(const char* op_name, std::uint64_t seq,
                                              std::exception_ptr error = nullptr);

 private:
  // Not noexcept: a callback's thread may be ended by pthread_exit (callback_thread.cpp).
  void run_callbacks(std::vector<std::function<void(Work&)>>& callbacks);

  const char* op_name_;
  std::uint64_t seq_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;                                  // guarded by mu_
  std::atomic<bool> finished_{false};                  // done_, readable without mu_
  std::atomic<int> source_rank_{-1};                   // a recv's sender, once known
  std::chrono::microseconds wait_spin_{0};             // set before the Work is handed out
  std::shared_ptr<WorkDriver> driver_;                 // set before the Work is handed out
  std::shared_ptr<CallbackThread> callback_thread_;    // set before the Work is handed out
  std::exception_ptr error_;                           // guarded by mu_; immutable once done_
  std::vector<std::function<void(Work&)>> callbacks_;  // guarded by mu_
  std::shared_ptr<FlightRecorder> trace_recorder_;     // guarded by mu_
  std::uint64_t trace_record_ = 0;                     // guarded by mu_
};

// A Work complete before it is handed out: an op its backend ran to the end on the issuing
// thread (tcp: a small allreduce through the board). Immutable, so it needs no lock, no condition
// variable and no callbacks list: cheaper to make and to wait on than a WorkState.
class DoneWork final : public Work {
 public:
  DoneWork(const char* op_name, std::uint64_t seq, std::exception_ptr error) noexcept
      : op_name_(op_name), seq_(seq), error_(std::move(error)) {}

  // A DoneWork whose memory comes from the block the calling thread freed last, if any: a
  // caller running small ops one after another makes one and drops one per op, and malloc and
  // free cost more than the rest of the Work's part of the op.
  static std::shared_ptr<Work> make(const char* op_name, std::uint64_t seq,
                                    std::exception_ptr error);

  void wait() override;
  bool wait_for(Duration) override { return true; }
  bool is_completed() const noexcept override { return true; }
  bool is_success() const noexcept override { return !error_; }
  std::exception_ptr exception() const override { return private_copy(error_); }
  void then(std::function<void(Work&)> fn) override { fn(*this); }
  const char* op_name() const noexcept override { return op_name_; }
  std::uint64_t seq() const noexcept override { return seq_; }

 private:
  const char* op_name_;
  std::uint64_t seq_;
  std::exception_ptr error_;
};

}  // namespace chorus
