// SPDX-License-Identifier: BSD-3-Clause
// The torch.distributed backend "chorus": torch's collective calls on a chorus tcp group.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/process_group.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "torch_base.hpp"
#include "torch_op_rules.hpp"
#include "torch_work.hpp"

namespace chorus::torch_bridge {

// The wire of the reductions this thread issues next (chorus.torch.wire_dtype(): torch's op
// options have no such field): unset, the group's default. Returns the previous setting.
std::optional<DataType> set_thread_wire_dtype(std::optional<DataType> wire);

// One chorus tcp group per torch group, bootstrapped through torch's store. Every op hands its
// arguments to one conversion (torch_op_rules.hpp), which checks its tensors (CPU, dtype,
// shapes) on the calling rank and describes one chorus op, staging non-contiguous tensors and
// lists through contiguous buffers; it returns a ChorusWork whose future completes from
// chorus's callbacks.
// What torch allows but chorus cannot do (several tensors per call, bitwise ReduceOps) throws
// a message that says so.
class ProcessGroupChorus final : public TorchBackendBase {
 public:
  // Blocks until the group is connected (every rank calls it), within `timeout`.
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, const std::string& name);
  // Wraps a group that exists already (one that ProcessGroup::shrink or grow made: the elastic
  // helper makes torch's default group of it). Connects nothing.
  explicit ProcessGroupChorus(std::shared_ptr<chorus::ProcessGroup> group);
  ~ProcessGroupChorus() override;
#if CHORUS_TORCH_BACKEND_SHUTDOWN
  // destroy_process_group(): the chorus group ends now (its peers see this rank leave), not
  // when the last Python reference to the torch group goes; later ops on it throw.
  void shutdown() override;
#endif

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
#if CHORUS_TORCH_COALESCED_TENSOR_OPS
  // torch 2.x's coalescing manager (several all_gather_into_tensor / reduce_scatter_tensor
  // calls in one `with dist._coalescing_manager()`): one chorus op for the whole list.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<std::int64_t>& output_splits,
                                               std::vector<std::int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override {}
  std::uint64_t getSequenceNumberForGroup() override { return ops_issued_.load(); }

  // The chorus group underneath (for tests and for reading its name in messages). Throws
  // InvalidArgument once the group was shut down.
  std::shared_ptr<chorus::ProcessGroup> chorus_group() const;

 private:
  // Every op: torch's arguments through the conversion table (plan_torch_op), the chorus op
  // run, and its Work.
  c10::intrusive_ptr<c10d::Work> issue(TorchOp op, const TorchArgs& args);

  mutable std::mutex mu_;
  std::shared_ptr<chorus::ProcessGroup> group_;  // guarded by mu_; null once shut down
  std::atomic<std::uint64_t> ops_issued_{0};
};

}  // namespace chorus::torch_bridge
