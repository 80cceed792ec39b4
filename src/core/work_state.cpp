// SPDX-License-Identifier: BSD-3-Clause
// WorkState: complete-once, waiters, then() callbacks.
#include "core/work_state.hpp"

#include <cxxabi.h>

#include <new>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/logging.hpp"

namespace chorus {
namespace {
// True while this thread runs then() callbacks inline, as the thread that completed their Work
// (no callback thread): a wait() there on an unfinished op would block the backend thread that
// has to finish it. A callback thread's callbacks may wait: that thread finishes no op.
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
  if (callbacks.empty()) {
    return true;
  }
  if (callback_thread_) {
    if (auto self = weak_from_this().lock()) {
      callback_thread_->post([self = std::move(self), callbacks = std::move(callbacks)]() mutable {
        self->run_callbacks(callbacks);
      });
      return true;
    }
  }
  ++t_callback_depth;
  run_callbacks(callbacks);
  --t_callback_depth;
  return true;
}

void WorkState::run_callbacks(std::vector<std::function<void(Work&)>>& callbacks) {
  for (auto& fn : callbacks) {
    try {
      fn(*this);
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is being ended (pthread_exit): let it unwind
    } catch (const std::exception& e) {
      CHORUS_WARN(coll, "a then() callback of {} (seq {}) threw and was ignored: {}", op_name_,
                  seq_, e.what());
    } catch (...) {
      CHORUS_WARN(coll, "a then() callback of {} (seq {}) threw and was ignored", op_name_, seq_);
    }
  }
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
    rethrow_private_copy(error_);  // copied under mu_, while this Work (and error_) is alive
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
  return private_copy(error_);
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

namespace {
// One spare block per thread for DoneWork's shared state (control block and object in one). The
// slot is trivially destructible, so a block freed while the thread exits (a thread_local of the
// user's holding a Work) is still safe to hand over: once the closer has freed the spare, blocks
// go back to operator delete. One thread_local struct: each access from a shared library costs a
// call (__tls_get_addr).
struct SpareSlot {
  void* block = nullptr;
  bool closer_made = false;  // t_spare_closer exists: it frees the spare at thread exit
  bool closed = false;       // t_spare_closer has run
};
thread_local SpareSlot t_spare;
struct SpareCloser {
  ~SpareCloser() {
    SpareSlot& slot = t_spare;
    ::operator delete(slot.block);
    slot.block = nullptr;
    slot.closed = true;
  }
};
thread_local SpareCloser t_spare_closer;

template <class T>
struct SpareBlockAllocator {
  using value_type = T;
  SpareBlockAllocator() noexcept = default;
  template <class U>
  explicit SpareBlockAllocator(const SpareBlockAllocator<U>& /*other*/) noexcept {}

  // allocate_shared rebinds this to one control-block type, so every block has one size.
  T* allocate(std::size_t n) {
    SpareSlot& slot = t_spare;
    if (n == 1 && slot.block != nullptr) {
      return static_cast<T*>(std::exchange(slot.block, nullptr));
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    SpareSlot& slot = t_spare;
    if (n == 1 && slot.block == nullptr && !slot.closed) {
      if (!slot.closer_made) {
        (void)&t_spare_closer;  // constructed on first use
        slot.closer_made = true;
      }
      slot.block = p;
      return;
    }
    ::operator delete(p);
  }
  friend bool operator==(const SpareBlockAllocator&, const SpareBlockAllocator&) noexcept {
    return true;
  }
  friend bool operator!=(const SpareBlockAllocator&, const SpareBlockAllocator&) noexcept {
    return false;
  }
};
}  // namespace

std::shared_ptr<Work> DoneWork::make(const char* op_name, std::uint64_t seq,
                                     std::exception_ptr error) {
  return std::allocate_shared<DoneWork>(SpareBlockAllocator<DoneWork>(), op_name, seq,
                                        std::move(error));
}

void DoneWork::wait() {
  if (error_) {
    rethrow_private_copy(error_);
  }
}

std::shared_ptr<WorkState> WorkState::completed(const char* op_name, std::uint64_t seq,
                                                std::exception_ptr error) {
  auto work = std::make_shared<WorkState>(op_name, seq);
  work->complete(std::move(error));
  return work;
}

}  // namespace chorus
