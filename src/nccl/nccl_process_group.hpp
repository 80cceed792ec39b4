// SPDX-License-Identifier: BSD-3-Clause
// NcclProcessGroup: the backend over one NCCL communicator on one CUDA device. Each op
// runs on the group's own stream, ordered after the caller's stream with an event; its Work
// completes when an event recorded after it fires; a Watchdog enforces deadlines.
#pragma once

#include "core/private.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <chorus/process_group.hpp>

#include "core/backend.hpp"

#include "core/callback_thread.hpp"
#include "nccl/event_pool.hpp"
#include "nccl/nccl_comm.hpp"
#include "nccl/nccl_work.hpp"
#include "nccl/watchdog.hpp"

namespace chorus::nccl {

class NcclProcessGroup final : public detail::Backend {
 public:
  // Use make_nccl_group() or split(): construction is two-phase (setup_device, then start with
  // a ready communicator) so that a failure in between cleans up through the destructor.
  NcclProcessGroup(int rank, int size, const GroupOptions& options, int device,
                   cudaStream_t caller_stream);
  // Waits for pending Works (each bounded by its deadline), then releases the communicator:
  // ncclCommFinalize + ncclCommDestroy when healthy, ncclCommAbort after a failure.
  ~NcclProcessGroup() override;

  // Creates the group's stream, barrier buffer and event pool on the device.
  void setup_device();
  // Adopts a ready communicator and starts the watchdog.
  void start(std::shared_ptr<NcclComm> comm);

  const char* backend_name() const noexcept override { return "nccl"; }
  Device device() const noexcept override { return Device::cuda(device_); }
  void abort(const std::string& reason) override;
  std::unique_ptr<Backend> split(const std::vector<int>& ranks, GroupOptions options) override;

  // For tests and diagnostics: waits up to `bound` for the communicator abort that follows a
  // failure; true once ncclCommAbort returned.
  bool wait_comm_aborted(Duration bound);
  cudaStream_t internal_stream() const noexcept { return stream_; }

  // {rank, size, group} of this group, the base of every error's context.
  ErrorContext group_context() const;

  void check_device(const Tensor& t, const char* what, const char* op_name) const override;
  // NCCL has no tags and no receive from any source (process_group.hpp states the limit).
  void check_supported(const OpDescriptor& op, const char* op_name) const override;

 protected:
  std::shared_ptr<Work> start(const OpDescriptor& op, const OpCall& call) override;

 private:
  std::shared_ptr<Work> do_allreduce(Tensor in, Tensor out, ReduceOp op, const OpCall& call);
  std::shared_ptr<Work> do_allgather(Tensor in, Tensor out, const OpCall& call);
  std::shared_ptr<Work> do_reduce_scatter(Tensor in, Tensor out, ReduceOp op, const OpCall& call);
  std::shared_ptr<Work> do_broadcast(Tensor inout, int root, const OpCall& call);
  std::shared_ptr<Work> do_reduce(Tensor in, Tensor out, ReduceOp op, int root, const OpCall& call);
  std::shared_ptr<Work> do_gather(Tensor in, Tensor out, int root, const OpCall& call);
  std::shared_ptr<Work> do_scatter(Tensor in, Tensor out, int root, const OpCall& call);
  std::shared_ptr<Work> do_all_to_all(Tensor in, Tensor out, const OpCall& call);
  std::shared_ptr<Work> do_barrier(const OpCall& call);
  std::shared_ptr<Work> do_send(Tensor tensor, int dst, const OpCall& call);
  std::shared_ptr<Work> do_recv(Tensor tensor, int src, const OpCall& call);
  // The variable-size collectives as grouped point-to-point (the reducing one: one grouped
  // ncclReduce per block), counts per rank as in OpDescriptor.
  std::shared_ptr<Work> do_variable(const OpDescriptor& op, const OpCall& call);
  // A coalesced op (OpDescriptor::ins/outs): the op's NCCL call for each pair inside one
  // ncclGroupStart/End, one event and one Work.
  std::shared_ptr<Work> do_coalesced(const OpDescriptor& op, const OpCall& call);

  template <class Enqueue>
  std::shared_ptr<Work> launch(const OpCall& call, OpInfo info, Enqueue&& enqueue);
  ErrorContext op_context(const OpCall& call) const;
  ncclDataType_t nccl_type(DataType dtype, const OpCall& call) const;
  ncclRedOp_t nccl_op(ReduceOp op, DataType dtype, const OpCall& call) const;
  void copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                  const OpCall& call) const;

  int device_;
  cudaStream_t caller_stream_;      // the application's; never destroyed here
  cudaStream_t stream_ = nullptr;   // ours: every NCCL call of this group runs on it
  void* barrier_buffer_ = nullptr;  // one int32 on the device for barrier()
  std::shared_ptr<EventPool> events_;
  std::shared_ptr<NcclComm> comm_;
  // Serializes NCCL calls on comm_ (NCCL communicators are not thread-safe) and the abort
  // against them, so that concurrent ops keep one issue order.
  std::mutex issue_mu_;
  // Where the Works' then() callbacks run (a thread started by the first one).
  const std::shared_ptr<CallbackThread> callbacks_ = std::make_shared<CallbackThread>(name());
  std::unique_ptr<Watchdog> watchdog_;  // last: destroyed first
};

}  // namespace chorus::nccl
