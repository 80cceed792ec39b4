// SPDX-License-Identifier: BSD-3-Clause
#include "process_group_chorus.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>

#include <pybind11/pybind11.h>
#include <chorus/errors.hpp>

#include "torch_convert.hpp"
#include "torch_store.hpp"

namespace chorus::torch_bridge {

namespace {

using Parts = std::vector<std::shared_ptr<chorus::Work>>;

thread_local std::optional<DataType> t_wire_dtype;

std::string prefix(const char* op) { return std::string("chorus: ") + op + ": "; }

void require_root(std::int64_t root, int size, const char* op) {
  if (root < 0 || root >= size) {
    throw InvalidArgument(prefix(op) + "root rank " + std::to_string(root) +
                          " is outside the group (size " + std::to_string(size) + ")");
  }
}

void require_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  if (a.scalar_type() != b.scalar_type()) {
    throw InvalidArgument(prefix(op) + "input is " + torch_dtype_name(a.scalar_type()) +
                          " but output is " + torch_dtype_name(b.scalar_type()));
  }
}

// A list of one tensor per rank (all_gather's outputs, reduce_scatter's inputs) against this
// rank's own tensor `own`: true for an uneven list, whose entry `rank` has own's shape and some
// other entry another size (the variable-size op then runs; only the dtypes must match); else
// every entry must be like `own`, and require_all_like() says how one is not.
bool check_per_rank_list(const std::vector<at::Tensor>& list, const at::Tensor& own, int rank,
                         const char* field, const char* op) {
  const bool uneven = list[static_cast<std::size_t>(rank)].sizes() == own.sizes() &&
                      std::any_of(list.begin(), list.end(),
                                  [&](const at::Tensor& t) { return t.numel() != own.numel(); });
  if (!uneven) {
    require_all_like(list, own, field, op);
    return false;
  }
  for (const auto& t : list) {
    require_same_dtype(own, t, op);
  }
  return true;
}

// Rows of dim 0 split into `splits` (empty: equal parts), as element counts per rank (the
// blocks lie back to back, as all_to_allv wants them).
std::vector<std::size_t> split_rows(const at::Tensor& t, const std::vector<std::int64_t>& splits,
                                    int size, const char* what) {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const std::int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<std::int64_t> row_splits = splits;
  if (row_splits.empty()) {
    if (rows % size != 0) {
      throw InvalidArgument(prefix("alltoall_base") + what + " has " + std::to_string(rows) +
                            " rows, not divisible by the group size " + std::to_string(size));
    }
    row_splits.assign(static_cast<std::size_t>(size), rows / size);
  }
  if (static_cast<int>(row_splits.size()) != size) {
    throw InvalidArgument(prefix("alltoall_base") + what + " split sizes have " +
                          std::to_string(row_splits.size()) + " entries; the group has " +
                          std::to_string(size) + " ranks");
  }
  if (std::accumulate(row_splits.begin(), row_splits.end(), std::int64_t{0}) != rows) {
    throw InvalidArgument(prefix("alltoall_base") + what + " split sizes do not add up to its " +
                          std::to_string(rows) + " rows");
  }
  std::vector<std::size_t> counts;
  for (std::int64_t s : row_splits) {
    if (s < 0) {
      throw InvalidArgument(prefix("alltoall_base") + what + " has a negative split size");
    }
    counts.push_back(static_cast<std::size_t>(s * row_elems));
  }
  return counts;
}

// Element counts of each tensor of `list`.
std::vector<std::size_t> numels(const std::vector<at::Tensor>& list) {
  std::vector<std::size_t> counts;
  for (const auto& t : list) {
    counts.push_back(static_cast<std::size_t>(t.numel()));
  }
  return counts;
}

#if CHORUS_TORCH_COALESCED_TENSOR_OPS
// The list forms of the coalesced tensor ops: one dtype for all (they travel as one buffer),
// and each output `factor` times its input's elements or the other way round.
void require_coalesced_pairs(const std::vector<at::Tensor>& small,
                             const std::vector<at::Tensor>& large, std::int64_t factor,
                             const char* small_name, const char* large_name, const char* op) {
  if (small.empty() || small.size() != large.size()) {
    throw InvalidArgument(prefix(op) + "expects as many " + large_name + " as " + small_name +
                          " (at least one); got " + std::to_string(large.size()) + " and " +
                          std::to_string(small.size()));
  }
  for (std::size_t i = 0; i < small.size(); ++i) {
    stage(small[i], op);
    stage(large[i], op);
    require_same_dtype(small[0], small[i], op);
    require_same_dtype(small[0], large[i], op);
    if (large[i].numel() != factor * small[i].numel()) {
      throw InvalidArgument(prefix(op) + large_name + "[" + std::to_string(i) + "] has " +
                            std::to_string(large[i].numel()) + " elements; expected group size " +
                            std::to_string(factor) + " x " + small_name + "[" + std::to_string(i) +
                            "]'s " + std::to_string(small[i].numel()));
    }
  }
}
#endif

// A coalesced chorus op being described (OpDescriptor::ins/outs): each torch tensor staged
// (a contiguous copy where it is not), the copies written back when the op completes.
class Coalesced {
 public:
  explicit Coalesced(OpDescriptor op) : op_(std::move(op)) {}

  // `in` and `out` may be the same tensor (in place).
  void add(const at::Tensor& in, const at::Tensor& out, const char* name) {
    Staged staged_in = stage(in, name);
    Staged staged_out = in.is_same(out) ? staged_in : stage(out, name);
    op_.ins.push_back(staged_in.view());
    op_.outs.push_back(staged_out.view());
    keep_.push_back(staged_in.buffer);
    keep_.push_back(staged_out.buffer);
    outputs_.push_back(std::move(staged_out));
  }

  // Runs the op; when it completes, the staged outputs go back and then `finish` runs.
  void start(ProcessGroup& group, const c10::intrusive_ptr<ChorusWork>& work,
             std::function<void()> finish = {}) {
    Parts parts{group.run(op_)};
    ChorusWork::start(
        work, std::move(parts),
        [outputs = std::move(outputs_), finish = std::move(finish)] {
          for (const Staged& out : outputs) {
            out.copy_back();
          }
          if (finish) {
            finish();
          }
        },
        std::move(keep_));
  }

 private:
  OpDescriptor op_;
  std::vector<Staged> outputs_;
  std::vector<at::Tensor> keep_;
};

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

c10::intrusive_ptr<ChorusWork> ProcessGroupChorus::make_work(c10d::OpType type, const char* name,
                                                             std::vector<at::Tensor> outputs,
                                                             int source) {
  ops_issued_.fetch_add(1, std::memory_order_relaxed);
  return c10::make_intrusive<ChorusWork>(getRank(), type, name, std::move(outputs), source);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  require_one_tensor(tensors.size(), op);
  require_root(opts.rootRank, getSize(), op);
  Staged t = stage(tensors[0], op);
  auto work = make_work(c10d::OpType::BROADCAST, op, tensors);
  Parts parts{chorus_group()->broadcast(t.view(), {.root = static_cast<int>(opts.rootRank),
                                           .timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts), [t] { t.copy_back(); }, {t.buffer});
  return work;
}

std::optional<DataType> set_thread_wire_dtype(std::optional<DataType> wire) {
  return std::exchange(t_wire_dtype, wire);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  require_one_tensor(tensors.size(), op);
  Staged t = stage(tensors[0], op);
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, t.user.scalar_type(), op);
  auto work = make_work(c10d::OpType::ALLREDUCE, op, tensors);
  Parts parts{chorus_group()->allreduce(t.view(), {.op = rop,
                                           .timeout = chorus_timeout(opts.timeout),
                                           .wire_dtype = t_wire_dtype})};
  ChorusWork::start(work, std::move(parts), [t] { t.copy_back(); }, {t.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (tensors.empty()) {
    throw InvalidArgument(prefix(op) + "got no tensors");
  }
  for (const auto& t : tensors) {
    require_same_dtype(tensors[0], t, op);
  }
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, tensors[0].scalar_type(), op);
  // One chorus op over every tensor, in place (OpDescriptor::ins/outs): no flattening here.
  Coalesced c(
      OpDescriptor{.type = OpType::allreduce,
                   .op = rop,
                   .timeout = chorus_timeout(opts.timeout),
                   .wire_dtype = t_wire_dtype});
  for (const auto& t : tensors) {
    c.add(t, t, op);
  }
  auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, op, tensors);
  c.start(*chorus_group(), work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  require_one_tensor(tensors.size(), op);
  require_root(opts.rootRank, getSize(), op);
  Staged t = stage(tensors[0], op);
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, t.user.scalar_type(), op);
  const bool root = opts.rootRank == getRank();
  auto work = make_work(c10d::OpType::REDUCE, op, tensors);
  Parts parts{chorus_group()->reduce(t.view(), t.view(),
                             {.op = rop,
                              .root = static_cast<int>(opts.rootRank),
                              .timeout = chorus_timeout(opts.timeout),
                              .wire_dtype = t_wire_dtype})};
  ChorusWork::start(work, std::move(parts),
                    [t, root] {
                      if (root) {
                        t.copy_back();
                      }
                    },
                    {t.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  require_one_tensor(inputs.size(), op);
  require_one_tensor(outputs.size(), op);
  Staged in = stage(inputs[0], op);
  const std::vector<at::Tensor>& list = outputs[0];
  if (static_cast<int>(list.size()) != getSize()) {
    throw InvalidArgument(prefix(op) + "the output list has " + std::to_string(list.size()) +
                          " tensors; the group has " + std::to_string(getSize()) + " ranks");
  }
  // Outputs of different sizes (torch passes them for uneven all_gather): each rank's block
  // has its output's size, and this rank's input must have its own output's.
  const std::vector<std::size_t> counts = numels(list);
  const bool uneven = check_per_rank_list(list, in.user, getRank(), "output_tensor_list", op);
  for (const auto& t : list) {
    stage(t, op);
  }
  const auto total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  at::Tensor flat = at::empty({static_cast<std::int64_t>(total)}, in.user.options());
  Staged f = stage(flat, op);
  auto work = make_work(c10d::OpType::ALLGATHER, op, list);
  Parts parts{
      uneven ? chorus_group()->allgatherv(in.view(), f.view(), counts,
                                  {.timeout = chorus_timeout(opts.timeout)})
             : chorus_group()->allgather(in.view(), f.view(), {.timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts), [flat, list] { unflatten_into(flat, list); },
                    {in.buffer, flat});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor";
  Staged in = stage(input, op);
  Staged out = stage(output, op);
  require_same_dtype(input, output, op);
  if (output.numel() != getSize() * input.numel()) {
    throw InvalidArgument(prefix(op) + "output has " + std::to_string(output.numel()) +
                          " elements; expected group size " + std::to_string(getSize()) +
                          " x input's " + std::to_string(input.numel()));
  }
  auto work = make_work(c10d::OpType::_ALLGATHER_BASE, op, {output});
  Parts parts{chorus_group()->allgather(in.view(), out.view(), {.timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts), [out] { out.copy_back(); }, {in.buffer, out.buffer});
  return work;
}

#if CHORUS_TORCH_COALESCED_TENSOR_OPS
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  require_coalesced_pairs(inputs, outputs, getSize(), "inputs", "outputs", op);
  // One coalesced allgather: output i is rank-major, every rank's input i in rank order, as
  // the descriptor lays it out.
  Coalesced c(OpDescriptor{.type = OpType::allgather, .timeout = chorus_timeout(opts.timeout)});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    c.add(inputs[i], outputs[i], op);
  }
  auto work = make_work(c10d::OpType::COALESCED, op, outputs);
  c.start(*chorus_group(), work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  require_coalesced_pairs(outputs, inputs, getSize(), "outputs", "inputs", op);
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, outputs[0].scalar_type(), op);
  // One coalesced reduce_scatter: block r of input i is reduced into rank r's output i.
  Coalesced c(OpDescriptor{
      .type = OpType::reduce_scatter,
      .op = rop,
      .timeout = chorus_timeout(opts.timeout),
      .wire_dtype = t_wire_dtype});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    c.add(inputs[i], outputs[i], op);
  }
  auto work = make_work(c10d::OpType::COALESCED, op, outputs);
  c.start(*chorus_group(), work);
  return work;
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  if (inputs.empty()) {
    throw InvalidArgument(prefix(op) + "got no input tensors");
  }
  if (static_cast<int>(outputs.size()) != getSize()) {
    throw InvalidArgument(prefix(op) + "expects one output list per rank (" +
                          std::to_string(getSize()) + "), got " + std::to_string(outputs.size()));
  }
  for (const auto& t : inputs) {
    stage(t, op);
    require_same_dtype(inputs[0], t, op);
  }
  for (const auto& list : outputs) {
    if (list.size() != inputs.size()) {
      throw InvalidArgument(prefix(op) + "each output list must hold one tensor per input (" +
                            std::to_string(inputs.size()) + ")");
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      require_all_like({list[i]}, inputs[i], "output_lists[r]", op);
    }
  }
  // One coalesced allgather of the inputs, each into a rank-major buffer of its own; the
  // finisher hands each rank's piece to its output tensor.
  const int size = getSize();
  Coalesced c(OpDescriptor{.type = OpType::allgather, .timeout = chorus_timeout(opts.timeout)});
  std::vector<at::Tensor> gathered;
  for (const auto& in : inputs) {
    gathered.push_back(at::empty({size * in.numel()}, in.options()));
    c.add(in, gathered.back(), op);
  }
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) {
    all.insert(all.end(), list.begin(), list.end());
  }
  auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, op, all);
  c.start(*chorus_group(), work, [gathered, outputs] {
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      for (std::size_t i = 0; i < gathered.size(); ++i) {
        const at::Tensor& out = outputs[r][i];
        const std::int64_t n = out.numel();
        out.copy_(gathered[i].narrow(0, static_cast<std::int64_t>(r) * n, n).view(out.sizes()));
      }
    }
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  require_one_tensor(inputs.size(), op);
  require_root(opts.rootRank, getSize(), op);
  Staged in = stage(inputs[0], op);
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> list;
  at::Tensor flat;
  Tensor out_view;
  if (root) {
    require_one_tensor(outputs.size(), op);
    list = outputs[0];
    if (static_cast<int>(list.size()) != getSize()) {
      throw InvalidArgument(prefix(op) + "root's gather_list has " + std::to_string(list.size()) +
                            " tensors; the group has " + std::to_string(getSize()) + " ranks");
    }
    require_all_like(list, in.user, "gather_list", op);
    for (const auto& t : list) {
      stage(t, op);
    }
    flat = at::empty({getSize() * in.user.numel()}, in.user.options());
    out_view = stage(flat, op).view();
  } else if (!outputs.empty() && !outputs[0].empty()) {
    throw InvalidArgument(prefix(op) + "gather_list must be empty on non-root ranks");
  }
  auto work = make_work(c10d::OpType::GATHER, op, list);
  Parts parts{chorus_group()->gather(
      in.view(), out_view,
      {.root = static_cast<int>(opts.rootRank), .timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts),
                    [flat, list] {
                      if (flat.defined()) {
                        unflatten_into(flat, list);
                      }
                    },
                    {in.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  require_one_tensor(outputs.size(), op);
  require_root(opts.rootRank, getSize(), op);
  Staged out = stage(outputs[0], op);
  const bool root = opts.rootRank == getRank();
  at::Tensor flat;
  Tensor in_view;
  if (root) {
    require_one_tensor(inputs.size(), op);
    const std::vector<at::Tensor>& list = inputs[0];
    if (static_cast<int>(list.size()) != getSize()) {
      throw InvalidArgument(prefix(op) + "root's scatter_list has " + std::to_string(list.size()) +
                            " tensors; the group has " + std::to_string(getSize()) + " ranks");
    }
    require_all_like(list, out.user, "scatter_list", op);
    for (const auto& t : list) {
      stage(t, op);
    }
    flat = flatten(list);
    in_view = stage(flat, op).view();
  } else if (!inputs.empty() && !inputs[0].empty()) {
    throw InvalidArgument(prefix(op) + "scatter_list must be empty on non-root ranks");
  }
  auto work = make_work(c10d::OpType::SCATTER, op, outputs);
  Parts parts{chorus_group()->scatter(
      in_view, out.view(),
      {.root = static_cast<int>(opts.rootRank), .timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts), [out] { out.copy_back(); }, {out.buffer, flat});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  require_one_tensor(outputs.size(), op);
  require_one_tensor(inputs.size(), op);
  Staged out = stage(outputs[0], op);
  const std::vector<at::Tensor>& list = inputs[0];
  if (static_cast<int>(list.size()) != getSize()) {
    throw InvalidArgument(prefix(op) + "the input list has " + std::to_string(list.size()) +
                          " tensors; the group has " + std::to_string(getSize()) + " ranks");
  }
  // Inputs of different sizes (uneven reduce_scatter, as NCCL's process group takes them):
  // block j has input j's size, and this rank's output must have its own input's shape.
  const std::vector<std::size_t> counts = numels(list);
  const bool uneven = check_per_rank_list(list, out.user, getRank(), "input_list", op);
  for (const auto& t : list) {
    stage(t, op);
  }
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, out.user.scalar_type(), op);
  at::Tensor flat = flatten(list);
  Staged in = stage(flat, op);
  auto work = make_work(c10d::OpType::REDUCE_SCATTER, op, outputs);
  const ReduceScatterOptions options{
      .op = rop, .timeout = chorus_timeout(opts.timeout), .wire_dtype = t_wire_dtype};
  Parts parts{uneven ? chorus_group()->reduce_scatterv(in.view(), out.view(), counts, options)
                     : chorus_group()->reduce_scatter(in.view(), out.view(), options)};
  ChorusWork::start(work, std::move(parts), [out] { out.copy_back(); }, {flat, out.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  Staged in = stage(input, op);
  Staged out = stage(output, op);
  require_same_dtype(input, output, op);
  if (input.numel() != getSize() * output.numel()) {
    throw InvalidArgument(prefix(op) + "input has " + std::to_string(input.numel()) +
                          " elements; expected group size " + std::to_string(getSize()) +
                          " x output's " + std::to_string(output.numel()));
  }
  const ReduceOp rop = chorus_reduce_op(opts.reduceOp, output.scalar_type(), op);
  auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, op, {output});
  Parts parts{chorus_group()->reduce_scatter(
      in.view(), out.view(),
      {.op = rop, .timeout = chorus_timeout(opts.timeout), .wire_dtype = t_wire_dtype})};
  ChorusWork::start(work, std::move(parts), [out] { out.copy_back(); }, {in.buffer, out.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<std::int64_t>& output_splits,
    std::vector<std::int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  Staged in = stage(input, op);
  Staged out = stage(output, op);
  require_same_dtype(input, output, op);
  auto work = make_work(c10d::OpType::ALLTOALL_BASE, op, {output});
  Parts parts;
  if (output_splits.empty() && input_splits.empty()) {
    if (input.numel() != output.numel() || input.numel() % getSize() != 0) {
      throw InvalidArgument(prefix(op) +
                            "input and output need equal element counts divisible "
                            "by the group size; got " +
                            std::to_string(input.numel()) + " and " +
                            std::to_string(output.numel()));
    }
    parts.push_back(
        chorus_group()->all_to_all(in.view(), out.view(), {.timeout = chorus_timeout(opts.timeout)}));
  } else {
    parts.push_back(chorus_group()->all_to_allv(in.view(), out.view(),
                                        split_rows(in.buffer, input_splits, getSize(), "input"),
                                        split_rows(out.buffer, output_splits, getSize(), "output"),
                                        {.timeout = chorus_timeout(opts.timeout)}));
  }
  ChorusWork::start(work, std::move(parts), [out] { out.copy_back(); }, {in.buffer, out.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  const auto n = static_cast<std::size_t>(getSize());
  if (inputs.size() != n || outputs.size() != n) {
    throw InvalidArgument(prefix(op) + "needs one input and one output tensor per rank (" +
                          std::to_string(n) + "); got " + std::to_string(inputs.size()) + " and " +
                          std::to_string(outputs.size()));
  }
  for (std::size_t j = 0; j < n; ++j) {
    stage(inputs[j], op);
    stage(outputs[j], op);
    require_same_dtype(inputs[0], inputs[j], op);
    require_same_dtype(inputs[0], outputs[j], op);
  }
  at::Tensor flat_in = flatten(inputs);
  at::Tensor flat_out = flatten(outputs);
  std::vector<std::size_t> in_counts = numels(inputs);
  std::vector<std::size_t> out_counts = numels(outputs);
  bool even = true;
  for (std::size_t j = 0; j < n; ++j) {
    even = even && in_counts[j] == in_counts[0] && out_counts[j] == in_counts[0];
  }
  auto work = make_work(c10d::OpType::ALLTOALL, op, outputs);
  Parts parts;
  const Tensor in_view = stage(flat_in, op).view();
  const Tensor out_view = stage(flat_out, op).view();
  if (even) {
    parts.push_back(
        chorus_group()->all_to_all(in_view, out_view, {.timeout = chorus_timeout(opts.timeout)}));
  } else {
    parts.push_back(chorus_group()->all_to_allv(in_view, out_view, std::move(in_counts),
                                        std::move(out_counts),
                                        {.timeout = chorus_timeout(opts.timeout)}));
  }
  ChorusWork::start(work, std::move(parts),
                    [flat_out, outputs] { unflatten_into(flat_out, outputs); },
                    {flat_in, flat_out});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  const char* op = "send";
  require_one_tensor(tensors.size(), op);
  if (tag < 0) {
    throw InvalidArgument(prefix(op) + "tag " + std::to_string(tag) + " is negative");
  }
  Staged t = stage(tensors[0], op);
  auto work = make_work(c10d::OpType::SEND, op, tensors);
  Parts parts{chorus_group()->send(t.view(), dst, static_cast<std::uint32_t>(tag))};
  ChorusWork::start(work, std::move(parts), nullptr, {t.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  const char* op = "recv";
  require_one_tensor(tensors.size(), op);
  if (tag < 0) {
    throw InvalidArgument(prefix(op) + "tag " + std::to_string(tag) + " is negative");
  }
  Staged t = stage(tensors[0], op);
  // From any source, the Work's sourceRank() asks the chorus op who sent it.
  auto work = make_work(c10d::OpType::RECV, op, tensors, src == kAnySource ? -1 : src);
  Parts parts{chorus_group()->recv(t.view(), src, static_cast<std::uint32_t>(tag))};
  ChorusWork::start(work, std::move(parts), [t] { t.copy_back(); }, {t.buffer});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  return recv(tensors, kAnySource, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  auto work = make_work(c10d::OpType::BARRIER, "barrier", {});
  Parts parts{chorus_group()->barrier({.timeout = chorus_timeout(opts.timeout)})};
  ChorusWork::start(work, std::move(parts), nullptr, {});
  return work;
}

void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  // chorus's barrier already names the ranks that did not arrive when it times out.
  chorus_group()->barrier({.timeout = chorus_timeout(opts.timeout)})->wait();
}

}  // namespace chorus::torch_bridge
