// SPDX-License-Identifier: BSD-3-Clause
// NcclWork: the Work of one NCCL op. Completion is a CUDA event recorded on the group's stream
// after the op; the watchdog (or synchronize()) turns that event into completion of the Work.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include <chorus/errors.hpp>
#include <chorus/types.hpp>

#include "core/work_state.hpp"
#include "nccl/event_pool.hpp"
#include "nccl/nccl_comm.hpp"

namespace chorus::nccl {

// What an op is, for error messages and the watchdog's deadline.
struct OpInfo {
  const char* name = "";
  std::uint64_t seq = 0;
  std::uint64_t bytes = 0;
  DataType dtype = DataType::uint8;
  std::optional<ReduceOp> op;
  int peer = -1;  // root of rooted ops, peer of send/recv; -1: none
  Duration timeout{0};
  Deadline deadline = Deadline::never();
  Clock::time_point issued{};
};

// "allreduce (seq 5, 4 MiB float32 sum)".
std::string describe(const OpInfo& info);

class NcclWork final : public WorkState {
 public:
  // Takes ownership of `done` (returned to `pool` on destruction). `caller_stream` is the stream
  // that wait() makes wait; `comm` is consulted by synchronize() for asynchronous errors.
  NcclWork(OpInfo info, cudaEvent_t done, std::shared_ptr<EventPool> pool,
           cudaStream_t caller_stream, std::shared_ptr<NcclComm> comm) noexcept;
  ~NcclWork() override;

  // Makes the caller's stream wait for the op (cudaStreamWaitEvent); never blocks the host.
  // Throws the op's error if it already failed.
  void wait() override;
  // Blocks the host until the op completes or fails (the watchdog bounds this by the op's
  // deadline) and rethrows its error.
  void synchronize() override;

  const OpInfo& info() const noexcept { return info_; }
  cudaEvent_t done_event() const noexcept { return done_; }
  // The group's context for messages; set once before the Work is published.
  void set_context(ErrorContext context) { context_ = std::move(context); }
  // Context naming this op (op, seq, bytes, timeout added to the group's).
  ErrorContext context() const;

 private:
  OpInfo info_;
  cudaEvent_t done_;
  std::shared_ptr<EventPool> pool_;
  cudaStream_t caller_stream_;
  std::shared_ptr<NcclComm> comm_;
  ErrorContext context_;
};

}  // namespace chorus::nccl
