// SPDX-License-Identifier: BSD-3-Clause
// WorkState: complete-once, waiters, then() callbacks.
#include "core/work_state.hpp"

#include <thread>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/logging.hpp"

namespace chorus {
namespace {
// True while this thread runs then() callbacks: a wait() there on an unfinished op would block
// the backend thread that has to finish it.
thread_local int t_callback_depth = 0;
}  // namespace

Work::~Work() = default;

void WorkState::trace_end_in(std::shared_ptr<FlightRecorder> recorder,
                             std::uint64_t record) noexcept {
  // An op that ran on the caller's thread is already complete here: no lock to take.
  if (!finished_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mu_);
    if (!done_) {
      trace_recorder_ = std::move(recorder);
      trace_record_ = record;
      return;
    }
  }
  recorder->ended(record, error_);
}

bool WorkState::complete(std::exception_ptr error) noexcept {
  std::vector<std::function<void(Work&)>> callbacks;
  std::shared_ptr<FlightRecorder> recorder;
  {
    std::lock_guard lock(mu_);
    if (done_) {
      return false;
    }
    done_ = true;
    error_ = std::move(error);
    finished_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    recorder.swap(trace_recorder_);
  }
  if (recorder) {
    recorder->ended(trace_record_, error_);  // error_ is immutable once done_
  }
  cv_.notify_all();
  ++t_callback_depth;
  for (auto& fn : callbacks) {
    try {
      fn(*this);
    } catch (const std::exception& e) {
      CHORUS_WARN(coll, "a then() callback of {} (seq {}) threw and was ignored: {}", op_name_,
                  seq_, e.what());
    } catch (...) {
      CHORUS_WARN(coll, "a then() callback of {} (seq {}) threw and was ignored", op_name_, seq_);
    }
  }
  --t_callback_depth;
  return true;
}

void WorkState::wait() {
  if (t_callback_depth == 0 && driver_ && !finished_.load(std::memory_order_acquire)) {
    driver_->drive(*this);
  }
  if (t_callback_depth == 0 && wait_spin_ > std::chrono::microseconds::zero()) {
    const auto stop = Clock::now() + wait_spin_;
    while (!finished_.load(std::memory_order_acquire) && Clock::now() < stop) {
      std::this_thread::yield();
    }
  }
  std::unique_lock lock(mu_);
  if (!done_ && t_callback_depth > 0) {
    throw InvalidArgument(fmt::format(
        "Work::wait() on {} (seq {}) called from a then() callback would deadlock; callbacks must not block",
        op_name_, seq_));
  }
  // No deadline here on purpose: the op itself carries one, enforced by its backend, which
  // completes this Work with a TimeoutError when it passes.
  cv_.wait(lock, [&] { return done_; });
  if (error_) {
    std::rethrow_exception(error_);
  }
}

bool WorkState::wait_for(Duration bound) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, bound, [&] { return done_; });
}

bool WorkState::is_completed() const noexcept { return finished_.load(std::memory_order_acquire); }

bool WorkState::is_success() const noexcept {
  std::lock_guard lock(mu_);
  return done_ && !error_;
}

std::exception_ptr WorkState::exception() const {
  std::lock_guard lock(mu_);
  return error_;
}

void WorkState::then(std::function<void(Work&)> fn) {
  {
    std::lock_guard lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn(*this);
}

void DoneWork::wait() {
  if (error_) {
    std::rethrow_exception(error_);
  }
}

std::shared_ptr<WorkState> WorkState::completed(const char* op_name, std::uint64_t seq,
                                                std::exception_ptr error) {
  auto work = std::make_shared<WorkState>(op_name, seq);
  work->complete(std::move(error));
  return work;
}

}  // namespace chorus
