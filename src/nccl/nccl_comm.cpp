// SPDX-License-Identifier: BSD-3-Clause
// NcclComm: non-blocking init, readiness polling with deadlines, split, shutdown and abort.
#include "nccl/nccl_comm.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "nccl/device_guard.hpp"
#include "nccl/nccl_check.hpp"
#include "nccl/nccl_features.hpp"

namespace chorus::nccl {
namespace {

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Best effort: makes `device` current without throwing (destructors, abort paths).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) noexcept {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      restore_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~QuietDeviceGuard() {
    if (restore_) {
      (void)cudaSetDevice(previous_);
    }
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace

void PollBackoff::pause() noexcept {
  ++round_;
  if (round_ < 64) {
    std::this_thread::yield();
    return;
  }
  const auto micros = std::min(1000, 10 * (round_ - 63));
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

std::shared_ptr<NcclComm> NcclComm::init(const ncclUniqueId& id, int rank, int size, int device,
                                         Deadline deadline, const ErrorContext& context,
                                         const std::function<void()>& on_timeout) {
  DeviceGuard guard(device, context);
  ncclConfig_t config = non_blocking_config();
  ncclComm_t raw = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&raw, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    const std::string text = describe_nccl_failure("ncclCommInitRankConfig", started, raw);
    if (raw != nullptr) {
      (void)ncclCommAbort(raw);
    }
    throw BackendError(fmt::format("{}: creating the NCCL communicator failed: {}; run with "
                                   "NCCL_DEBUG=INFO to see why",
                                   where(context), text),
                       context);
  }
  auto comm = std::make_shared<NcclComm>(raw, device);
  try {
    comm->wait_ready(deadline, context, "NCCL communicator init");
  } catch (const TimeoutError&) {
    comm->abort();
    on_timeout();
    throw;  // on_timeout() always throws; this only keeps the original if it did not
  } catch (...) {
    comm->abort();
    throw;
  }
  return comm;
}

NcclComm::~NcclComm() { abort(); }

void NcclComm::wait_ready(Deadline deadline, const ErrorContext& context, const char* what) {
  const auto started = Clock::now();
  PollBackoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard lock(mu_);
      if (state_ != State::live) {
        throw BackendError(fmt::format("{}: the NCCL communicator was aborted while waiting for {}",
                                       where(context), what),
                           context);
      }
      const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
      if (polled != ncclSuccess) {
        state = polled;
      }
    }
    if (state == ncclSuccess) {
      return;
    }
    if (state != ncclInProgress) {
      throw BackendError(fmt::format("{}: {} failed: {}; run every rank with NCCL_DEBUG=WARN to "
                                     "see NCCL's own report",
                                     where(context), what,
                                     describe_nccl_failure("ncclCommGetAsyncError", state, comm_)),
                         context);
    }
    if (deadline.expired()) {
      ErrorContext ctx = context;
      ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - started);
      const std::string text = fmt::format("{}: {} did not complete within {}", where(context),
                                           what, format_duration(ctx.elapsed));
      throw TimeoutError(text, std::move(ctx));
    }
    backoff.pause();
  }
}

std::optional<ncclResult_t> NcclComm::async_error(bool try_only) noexcept {
  std::unique_lock lock(mu_, std::defer_lock);
  if (try_only) {
    if (!lock.try_lock()) {
      return std::nullopt;
    }
  } else {
    lock.lock();
  }
  if (state_ != State::live) {
    return std::nullopt;
  }
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
  return polled == ncclSuccess ? state : polled;
}

std::string NcclComm::last_error() const {
#if CHORUS_NCCL_HAS_LAST_ERROR
  std::lock_guard lock(mu_);
  if (state_ != State::live) {
    return {};
  }
  const char* text = ncclGetLastError(comm_);
  return text ? std::string(text) : std::string();
#else
  return {};
#endif
}

void NcclComm::abort() noexcept {
  std::lock_guard lock(mu_);
  if (state_ != State::live) {
    return;
  }
  QuietDeviceGuard guard(device_);
  const ncclResult_t result = ncclCommAbort(comm_);
  if (result != ncclSuccess) {
    CHORUS_WARN(nccl, "ncclCommAbort returned {}; the communicator's resources may leak",
                ncclGetErrorString(result));
  }
  state_ = State::aborted;
}

bool NcclComm::aborted() const noexcept {
  std::lock_guard lock(mu_);
  return state_ == State::aborted;
}

void NcclComm::shutdown(Deadline deadline) noexcept {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::live) {
      return;
    }
  }
  QuietDeviceGuard guard(device_);
  bool finalized = false;
  try {
    const ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess || result == ncclInProgress) {
      wait_ready(deadline, ErrorContext{.op = "shutdown"}, "ncclCommFinalize");
      finalized = true;
    } else {
      CHORUS_WARN(nccl, "ncclCommFinalize returned {}; aborting the communicator instead",
                  ncclGetErrorString(result));
    }
  } catch (const std::exception& e) {
    CHORUS_WARN(nccl, "{}; aborting the communicator instead", e.what());
  }
  if (!finalized) {
    abort();
    return;
  }
  std::lock_guard lock(mu_);
  if (state_ != State::live) {
    return;
  }
  const ncclResult_t result = ncclCommDestroy(comm_);
  if (result != ncclSuccess) {
    CHORUS_WARN(nccl, "ncclCommDestroy returned {}; the communicator's resources may leak",
                ncclGetErrorString(result));
  }
  state_ = State::destroyed;
}

std::shared_ptr<NcclComm> NcclComm::split(int color, int key, Deadline deadline,
                                          const ErrorContext& context) {
#if CHORUS_NCCL_HAS_SPLIT
  DeviceGuard guard(device_, context);
  ncclConfig_t config = non_blocking_config();
  ncclComm_t raw = nullptr;
  {
    std::lock_guard lock(mu_);
    if (state_ != State::live) {
      throw BackendError(
          fmt::format("{}: the parent NCCL communicator was aborted", where(context)), context);
    }
  }
  CHORUS_NCCL_CHECK(ncclCommSplit(comm_, color, key, &raw, &config), comm_, context);
  if (raw == nullptr) {
    // Not a member: the parent took part in the split's bootstrap; wait until that is done.
    wait_ready(deadline, context, "ncclCommSplit on the parent communicator");
    return nullptr;
  }
  auto child = std::make_shared<NcclComm>(raw, device_);
  try {
    child->wait_ready(deadline, context, "ncclCommSplit");
    wait_ready(deadline, context, "ncclCommSplit on the parent communicator");
  } catch (...) {
    child->abort();
    throw;
  }
  return child;
#else
  (void)color;
  (void)key;
  (void)deadline;
  throw BackendError(fmt::format("{}: split needs NCCL >= 2.18 (ncclCommSplit); this build has "
                                 "{}.{}.{}; create the subgroup with make_nccl_group on a prefix "
                                 "store instead",
                                 where(context), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),
                     context);
#endif
}

}  // namespace chorus::nccl
