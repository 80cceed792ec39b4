// SPDX-License-Identifier: BSD-3-Clause
// NcclWork: stream-side wait, host-side synchronize, and messages about the op.
#include "nccl/nccl_work.hpp"

#include <fmt/format.h>

#include "core/format.hpp"
#include "nccl/device_guard.hpp"
#include "nccl/nccl_check.hpp"

namespace chorus::nccl {

std::string describe(const OpInfo& info) {
  std::string text = fmt::format("{} (seq {}", info.name, info.seq);
  if (info.bytes > 0) {
    text += fmt::format(", {} {}", format_bytes(info.bytes), to_string(info.dtype));
  }
  if (info.op) {
    text += fmt::format(" {}", to_string(*info.op));
  }
  if (info.peer >= 0) {
    const bool p2p = std::string_view(info.name) == "send" || std::string_view(info.name) == "recv";
    text += fmt::format(", {} {}", p2p ? "peer" : "root", info.peer);
  }
  return text + ")";
}

NcclWork::NcclWork(OpInfo info, cudaEvent_t done, std::shared_ptr<EventPool> pool,
                   cudaStream_t caller_stream, std::shared_ptr<NcclComm> comm) noexcept
    : WorkState(info.name, info.seq),
      info_(info),
      done_(done),
      pool_(std::move(pool)),
      caller_stream_(caller_stream),
      comm_(std::move(comm)) {}

NcclWork::~NcclWork() { pool_->release(done_); }

ErrorContext NcclWork::context() const {
  ErrorContext ctx = context_;
  ctx.op = info_.name;
  ctx.seq = info_.seq;
  ctx.bytes = info_.bytes;
  ctx.timeout = info_.timeout;
  ctx.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - info_.issued);
  return ctx;
}

void NcclWork::wait() {
  if (auto error = exception()) {
    std::rethrow_exception(error);
  }
  if (is_completed()) {
    return;  // done and successful: the stream dependency would be a no-op
  }
  DeviceGuard guard(pool_->device(), context());
  CHORUS_CUDA_CHECK(cudaStreamWaitEvent(caller_stream_, done_, 0), context());
}

void NcclWork::synchronize() {
  // Fast path for small ops: poll the event here instead of waiting for the watchdog's next
  // round. Success needs both the event and a clean communicator; anything else is left to the
  // watchdog, which completes or fails this Work within the op's deadline.
  PollBackoff backoff;
  while (!is_completed()) {
    const cudaError_t state = cudaEventQuery(done_);
    if (state == cudaSuccess) {
      const auto comm_state = comm_->async_error(/*try_only=*/true);
      if (comm_state && (*comm_state == ncclSuccess || *comm_state == ncclInProgress)) {
        complete(nullptr);
      }
      break;
    }
    if (state != cudaErrorNotReady) {
      break;
    }
    backoff.pause();
  }
  WorkState::wait();
}

}  // namespace chorus::nccl
