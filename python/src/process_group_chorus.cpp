// SPDX-License-Identifier: BSD-3-Clause
#include "process_group_chorus.hpp"

#include <optional>
#include <utility>

#include <pybind11/pybind11.h>
#include <chorus/errors.hpp>

#include "torch_convert.hpp"
#include "torch_store.hpp"

namespace chorus::torch_bridge {

namespace {

thread_local std::optional<DataType> t_wire_dtype;

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout,
                                       const std::string& name)
    : TorchBackendBase(rank, size) {
  const auto group_timeout = chorus_timeout(timeout);
  auto chorus_store = make_torch_store(store, group_timeout.value_or(kDefaultTimeout), size);
  TcpGroupOptions options;
  options.group.name = name;
  options.group.timeout = group_timeout;
  group_ = make_tcp_group(std::move(chorus_store), rank, size, options);
}

ProcessGroupChorus::ProcessGroupChorus(std::shared_ptr<chorus::ProcessGroup> group)
    : TorchBackendBase(group->rank(), group->size()), group_(std::move(group)) {}

namespace {

// Destroying a group joins its engine thread, which may be finishing an op's callback that
// drops the last reference to a tensor owned by Python (that needs the GIL). Python drops the
// group with the GIL held (destroy_process_group, interpreter exit): let go of it here, or the
// two threads wait for each other forever.
void release(std::shared_ptr<chorus::ProcessGroup> group) {
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
    no_gil.emplace();
  }
  group.reset();
}

}  // namespace

ProcessGroupChorus::~ProcessGroupChorus() {
  std::shared_ptr<chorus::ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group.swap(group_);
  }
  release(std::move(group));
}

#if CHORUS_TORCH_BACKEND_SHUTDOWN
void ProcessGroupChorus::shutdown() {
  std::shared_ptr<chorus::ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group.swap(group_);
  }
  release(std::move(group));
}
#endif

std::shared_ptr<chorus::ProcessGroup> ProcessGroupChorus::chorus_group() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!group_) {
    throw InvalidArgument(
        "chorus: this group was shut down (torch's destroy_process_group); make a new one");
  }
  return group_;
}

std::optional<DataType> set_thread_wire_dtype(std::optional<DataType> wire) {
  return std::exchange(t_wire_dtype, wire);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::issue(TorchOp op, const TorchArgs& args) {
  TorchPlan plan = plan_torch_op(op, args, getRank(), getSize(), t_wire_dtype);
  ops_issued_.fetch_add(1, std::memory_order_relaxed);
  auto work = c10::make_intrusive<ChorusWork>(getRank(), plan.work_type, plan.name,
                                              std::move(plan.result), plan.source_rank);
  ChorusWork::start(work, {chorus_group()->run(plan.op)}, plan.staging.finisher(),
                    plan.staging.take_keep());
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  return issue(TorchOp::broadcast,
               {.tensors = tensors, .root = opts.rootRank, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  return issue(TorchOp::allreduce,
               {.tensors = tensors, .reduce_op = opts.reduceOp, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return issue(TorchOp::allreduce_coalesced,
               {.tensors = tensors, .reduce_op = opts.reduceOp, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  return issue(TorchOp::reduce, {.tensors = tensors,
                                 .reduce_op = opts.reduceOp,
                                 .root = opts.rootRank,
                                 .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return issue(TorchOp::allgather,
               {.inputs = inputs, .output_lists = outputs, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return issue(TorchOp::allgather_into_tensor,
               {.inputs = input, .outputs = output, .timeout = opts.timeout});
}

#if CHORUS_TORCH_COALESCED_TENSOR_OPS
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return issue(TorchOp::allgather_into_tensor_coalesced,
               {.inputs = inputs, .outputs = outputs, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return issue(
      TorchOp::reduce_scatter_tensor_coalesced,
      {.inputs = inputs, .outputs = outputs, .reduce_op = opts.reduceOp, .timeout = opts.timeout});
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return issue(TorchOp::allgather_coalesced,
               {.inputs = inputs, .output_lists = outputs, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  return issue(
      TorchOp::gather,
      {.inputs = inputs, .output_lists = outputs, .root = opts.rootRank, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  return issue(
      TorchOp::scatter,
      {.outputs = outputs, .input_lists = inputs, .root = opts.rootRank, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return issue(TorchOp::reduce_scatter, {.outputs = outputs,
                                         .input_lists = inputs,
                                         .reduce_op = opts.reduceOp,
                                         .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return issue(
      TorchOp::reduce_scatter_tensor,
      {.inputs = input, .outputs = output, .reduce_op = opts.reduceOp, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<std::int64_t>& output_splits,
    std::vector<std::int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  return issue(TorchOp::alltoall_base, {.inputs = input,
                                        .outputs = output,
                                        .input_splits = input_splits,
                                        .output_splits = output_splits,
                                        .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  return issue(TorchOp::alltoall, {.inputs = inputs, .outputs = outputs, .timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  return issue(TorchOp::send, {.tensors = tensors, .peer = dst, .tag = tag});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  return issue(TorchOp::recv, {.tensors = tensors, .peer = src, .tag = tag});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  return recv(tensors, kAnySource, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  return issue(TorchOp::barrier, {.timeout = opts.timeout});
}

void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  // chorus's barrier already names the ranks that did not arrive when it times out.
  chorus_group()->barrier({.timeout = chorus_timeout(opts.timeout)})->wait();
}

}  // namespace chorus::torch_bridge
