// SPDX-License-Identifier: BSD-3-Clause
// Watchdog: the per-group polling thread. Rounds run every millisecond while Works are pending
// and every 100 ms otherwise (the communicator can still report an asynchronous error).
#include "nccl/watchdog.hpp"

#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "nccl/nccl_check.hpp"

namespace chorus::nccl {
namespace {

constexpr auto kBusyPoll = std::chrono::milliseconds(1);
constexpr auto kIdlePoll = std::chrono::milliseconds(100);

std::exception_ptr make_error(ErrorCode code, const std::string& message, ErrorContext context) {
  try {
    throw_error(code, message, std::move(context));
  } catch (...) {
    return std::current_exception();
  }
}

// The facts of a root error that decide how the other Works are failed.
struct RootFacts {
  ErrorCode code = ErrorCode::backend;
  std::string op;
  std::uint64_t seq = 0;
};

RootFacts facts_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return {error.code(), error.context().op, error.context().seq};
  } catch (...) {
    return {};
  }
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "unknown error";
  }
}

Duration age_of(const OpInfo& info) {
  return std::chrono::duration_cast<Duration>(Clock::now() - info.issued);
}

}  // namespace

Watchdog::Watchdog(std::shared_ptr<NcclComm> comm, int device, ErrorContext group_context,
                   std::function<void(std::exception_ptr)> on_failure,
                   std::function<void()> abort_comm)
    : comm_(std::move(comm)),
      device_(device),
      group_context_(std::move(group_context)),
      on_failure_(std::move(on_failure)),
      abort_comm_(std::move(abort_comm)),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Anything still pending (the owner did not drain) is failed so that no waiter hangs.
  std::deque<std::shared_ptr<NcclWork>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(pending_);
  }
  for (auto& work : left) {
    work->complete(make_error(ErrorCode::aborted,
                              fmt::format("{} {} was still pending when its group was destroyed; "
                                          "wait for every Work before destroying the group",
                                          describe(work->info()), on_rank(group_context_)),
                              work->context()));
  }
}

void Watchdog::track(std::shared_ptr<NcclWork> work) {
  std::exception_ptr failed;
  {
    std::lock_guard lock(mu_);
    if (!failure_) {
      const bool was_idle = pending_.empty();
      pending_.push_back(std::move(work));
      if (was_idle) {
        cv_.notify_all();  // leave the idle poll interval
      }
      return;
    }
    failed = failure_;
  }
  work->complete(
      make_error(facts_of(failed).code,
                 fmt::format("{} {} was issued after the group failed: {}", describe(work->info()),
                             on_rank(group_context_), what_of(failed)),
                 work->context()));
}

bool Watchdog::poison(std::exception_ptr root) {
  std::deque<std::shared_ptr<NcclWork>> victims;
  {
    std::lock_guard lock(mu_);
    if (failure_) {
      return false;
    }
    failure_ = root;
    victims.swap(pending_);
    abort_requested_ = true;
  }
  on_failure_(root);
  const RootFacts facts = facts_of(root);
  const std::string root_text = what_of(root);
  for (auto& work : victims) {
    // The op that caused the failure carries the root error itself; the others name
    // themselves, their age and the root cause.
    if (facts.seq == work->info().seq && facts.op == work->info().name) {
      work->complete(root);
      continue;
    }
    work->complete(make_error(
        facts.code,
        fmt::format("{} {} was pending for {} when the group failed: {}", describe(work->info()),
                    on_rank(group_context_), format_duration(age_of(work->info())), root_text),
        work->context()));
  }
  cv_.notify_all();
  return true;
}

void Watchdog::drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return pending_.empty() || stop_; });
}

bool Watchdog::wait_comm_aborted(Duration bound) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, bound, [&] { return comm_aborted_; });
}

std::size_t Watchdog::pending() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

void Watchdog::run() noexcept {
  log::set_thread_context(fmt::format("{} r{}/{} watchdog", group_context_.group,
                                      group_context_.rank, group_context_.size));
  if (cudaSetDevice(device_) != cudaSuccess) {
    CHORUS_WARN(nccl, "watchdog could not make cuda:{} current; event polling may fail", device_);
  }
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (abort_requested_ && !comm_aborted_) {
      lock.unlock();
      abort_comm_();
      lock.lock();
      comm_aborted_ = true;
      cv_.notify_all();
      CHORUS_INFO(nccl, "{}: the NCCL communicator was aborted", on_rank(group_context_));
      continue;
    }
    if (comm_aborted_) {
      cv_.wait(lock, [&] { return stop_; });
      break;
    }
    lock.unlock();
    std::exception_ptr failure;
    try {
      failure = poll_once();
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure && poison(failure)) {
      CHORUS_WARN(nccl, "{}", what_of(failure));
    }
    lock.lock();
    if (stop_ || abort_requested_) {
      continue;
    }
    cv_.wait_for(lock, pending_.empty() ? kIdlePoll : kBusyPoll);
  }
}

std::exception_ptr Watchdog::poll_once() {
  std::vector<std::shared_ptr<NcclWork>> snapshot;
  {
    std::lock_guard lock(mu_);
    snapshot.assign(pending_.begin(), pending_.end());
  }
  // Asynchronous errors first: an op whose event fired on a broken communicator did not succeed.
  if (const auto state = comm_->async_error(/*try_only=*/true);
      state && *state != ncclSuccess && *state != ncclInProgress) {
    return make_async_error(*state, snapshot.empty() ? nullptr : snapshot.front().get());
  }
  std::vector<std::shared_ptr<NcclWork>> done;
  std::exception_ptr failure;
  for (const auto& work : snapshot) {
    if (work->is_completed()) {  // synchronize() completed it
      done.push_back(work);
      continue;
    }
    const cudaError_t state = cudaEventQuery(work->done_event());
    if (state == cudaSuccess) {
      work->complete(nullptr);
      done.push_back(work);
      continue;
    }
    if (state != cudaErrorNotReady) {
      failure = make_event_error(state, *work);
      break;
    }
    if (work->info().deadline.expired()) {
      failure = make_timeout(*work);
      break;
    }
  }
  if (!done.empty()) {
    std::lock_guard lock(mu_);
    std::erase_if(pending_, [&](const std::shared_ptr<NcclWork>& w) { return w->is_completed(); });
    if (pending_.empty()) {
      cv_.notify_all();  // drain()
    }
  }
  return failure;
}

std::exception_ptr Watchdog::make_timeout(const NcclWork& work) const {
  const OpInfo& info = work.info();
  return make_error(
      ErrorCode::timeout,
      fmt::format("{} {} on cuda:{} timed out after {}: it was issued {} ago and has not "
                  "completed. The NCCL communicator was aborted and every later call on this "
                  "group fails with this error. A peer rank may be stuck, dead or issuing "
                  "different collectives, or work queued before the op on the caller's stream "
                  "never finished; check every rank's log (NCCL_DEBUG=WARN), or raise the "
                  "timeout (the op's timeout option or CHORUS_TIMEOUT) if the op is "
                  "legitimately slow",
                  describe(info), on_rank(group_context_), device_, format_duration(info.timeout),
                  format_duration(age_of(info))),
      work.context());
}

std::exception_ptr Watchdog::make_async_error(ncclResult_t result, const NcclWork* oldest) const {
  ErrorContext ctx = oldest ? oldest->context() : group_context_;
  const std::string what_op = oldest ? fmt::format("{} (pending for {})", describe(oldest->info()),
                                                   format_duration(age_of(oldest->info())))
                                     : std::string("the group (no op pending)");
  return make_error(
      ErrorCode::backend,
      fmt::format("{} {}: NCCL reported an asynchronous error: {}{}. The communicator was "
                  "aborted and every later call on this group fails with this error; check "
                  "every rank's NCCL_DEBUG=WARN output (a peer may have died or its network "
                  "failed)",
                  what_op, on_rank(group_context_), ncclGetErrorString(result),
                  [&] {
                    const std::string last = comm_->last_error();
                    return last.empty() ? std::string() : " [NCCL: " + last + "]";
                  }()),
      std::move(ctx));
}

std::exception_ptr Watchdog::make_event_error(cudaError_t result, const NcclWork& work) const {
  (void)cudaGetLastError();
  return make_error(
      ErrorCode::backend,
      fmt::format("{} {}: CUDA reported {} ({}) while the op was running; the device is in an "
                  "error state: check the kernels queued on the caller's stream and the "
                  "buffers' validity",
                  describe(work.info()), on_rank(group_context_), cudaGetErrorName(result),
                  cudaGetErrorString(result)),
      work.context());
}

}  // namespace chorus::nccl
