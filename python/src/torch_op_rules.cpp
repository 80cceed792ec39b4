// SPDX-License-Identifier: BSD-3-Clause
// The conversion table (torch_op_rules.hpp). Every call takes the same path: the options that
// every op shares are converted once (timeout; the root, checked, for rooted ops; the ReduceOp
// and the wire for reductions), and one plan function per torch call says which of torch's
// tensors are the descriptor's input and output, staged by Staging, and checks what is torch's
// own convention about them.
#include "torch_op_rules.hpp"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <string>

#include <chorus/errors.hpp>

#include "torch_convert.hpp"

namespace chorus::torch_bridge {
namespace {

// What a plan function sees of the call.
struct Call {
  const TorchArgs& args;
  const char* name;
  int rank;
  int size;
  bool is_root() const { return args.root == rank; }
};

std::vector<std::size_t> numels(at::TensorList list) {
  std::vector<std::size_t> counts;
  counts.reserve(list.size());
  for (const auto& t : list) {
    counts.push_back(static_cast<std::size_t>(t.numel()));
  }
  return counts;
}

// A list of one tensor per rank (all_gather's outputs, reduce_scatter's inputs) against this
// rank's own tensor `own`. An uneven list, whose entry `rank` has own's shape and some other
// entry another size, runs the variable-size op: its counts are returned (only the dtypes must
// match). Otherwise every entry must be like `own`, and require_all_like() says how one is not.
std::optional<std::vector<std::size_t>> per_rank_list(const Call& c, at::TensorList list,
                                                      const at::Tensor& own, const char* what,
                                                      const char* field) {
  require_one_per_rank(list.size(), c.size, what, c.name);
  const bool uneven = list[static_cast<std::size_t>(c.rank)].sizes() == own.sizes() &&
                      std::any_of(list.begin(), list.end(),
                                  [&](const at::Tensor& t) { return t.numel() != own.numel(); });
  if (!uneven) {
    require_all_like(list, own, field, c.name);
    return std::nullopt;
  }
  for (const auto& t : list) {
    require_same_dtype(own, t, c.name);
  }
  return numels(list);
}

// The root's list of gather and scatter (one tensor like `own` per rank); other ranks pass
// none. Null on those.
const std::vector<at::Tensor>* root_list(const Call& c,
                                         c10::ArrayRef<std::vector<at::Tensor>> lists,
                                         const at::Tensor& own, const char* field) {
  if (!c.is_root()) {
    if (!lists.empty() && !lists[0].empty()) {
      throw InvalidArgument(op_prefix(c.name) + field + " must be empty on non-root ranks");
    }
    return nullptr;
  }
  require_one_tensor(lists.size(), c.name);
  const std::string what = std::string("root's ") + field;
  require_one_per_rank(lists[0].size(), c.size, what.c_str(), c.name);
  require_all_like(lists[0], own, field, c.name);
  return &lists[0];
}

// Rows of dim 0 split into `splits` (empty: equal parts), as element counts per rank (the
// blocks lie back to back, as all_to_allv wants them).
std::vector<std::size_t> split_rows(const Call& c, const at::Tensor& t,
                                    c10::ArrayRef<std::int64_t> splits, const char* what) {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const std::int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<std::int64_t> row_splits = splits.vec();
  const std::string prefix = op_prefix(c.name) + what;
  if (row_splits.empty()) {
    if (rows % c.size != 0) {
      throw InvalidArgument(prefix + " has " + std::to_string(rows) +
                            " rows, not divisible by the group size " + std::to_string(c.size));
    }
    row_splits.assign(static_cast<std::size_t>(c.size), rows / c.size);
  }
  if (static_cast<int>(row_splits.size()) != c.size) {
    throw InvalidArgument(prefix + " split sizes have " + std::to_string(row_splits.size()) +
                          " entries; the group has " + std::to_string(c.size) + " ranks");
  }
  if (std::accumulate(row_splits.begin(), row_splits.end(), std::int64_t{0}) != rows) {
    throw InvalidArgument(prefix + " split sizes do not add up to its " + std::to_string(rows) +
                          " rows");
  }
  std::vector<std::size_t> counts;
  for (std::int64_t s : row_splits) {
    if (s < 0) {
      throw InvalidArgument(prefix + " has a negative split size");
    }
    counts.push_back(static_cast<std::size_t>(s * row_elems));
  }
  return counts;
}

// broadcast, allreduce, reduce: one tensor, in place (reduce's result lands on the root only).
void plan_in_place(const Call& c, TorchPlan& p) {
  require_one_tensor(c.args.tensors.size(), c.name);
  const bool copy_back = p.op.type != OpType::reduce || c.is_root();
  p.op.in = p.op.out = p.staging.output(c.args.tensors[0], copy_back);
  p.result = c.args.tensors.vec();
}

// One input and one output tensor, of one dtype.
void plan_pair(const Call& c, TorchPlan& p) {
  const at::Tensor& in = c.args.inputs[0];
  const at::Tensor& out = c.args.outputs[0];
  p.op.in = p.staging.input(in);
  p.op.out = p.staging.output(out);
  require_same_dtype(in, out, c.name);
  p.result = c.args.outputs.vec();
}

// One chorus op over every tensor, in place (OpDescriptor::ins/outs): no flattening.
void plan_allreduce_coalesced(const Call& c, TorchPlan& p) {
  const at::TensorList tensors = c.args.tensors;
  if (tensors.empty()) {
    throw InvalidArgument(op_prefix(c.name) + "got no tensors");
  }
  for (const auto& t : tensors) {
    require_same_dtype(tensors[0], t, c.name);
  }
  for (const auto& t : tensors) {
    p.op.ins.push_back(p.staging.output(t));
    p.op.outs.push_back(p.op.ins.back());
  }
  p.result = tensors.vec();
}

// allgather and reduce_scatter on a list: this rank's one tensor against torch's list of one
// tensor per rank (all_gather's outputs, reduce_scatter's inputs), packed into one buffer. A
// list of different sizes (torch passes one for uneven all_gather; NCCL's process group takes
// one for reduce_scatter) runs the variable-size op: block j has entry j's size, and this
// rank's own tensor must have its own entry's shape.
void plan_per_rank_list(const Call& c, TorchPlan& p) {
  const bool gathers = p.op.type == OpType::allgather;
  const at::TensorList own_list = gathers ? c.args.inputs : c.args.outputs;
  const auto lists = gathers ? c.args.output_lists : c.args.input_lists;
  require_one_tensor(own_list.size(), c.name);
  require_one_tensor(lists.size(), c.name);
  const at::Tensor& own = own_list[0];
  const std::vector<at::Tensor>& list = lists[0];
  Tensor& own_view = gathers ? p.op.in : p.op.out;
  Tensor& list_view = gathers ? p.op.out : p.op.in;
  own_view = gathers ? p.staging.input(own) : p.staging.output(own);
  const auto counts = per_rank_list(c, list, own, gathers ? "the output list" : "the input list",
                                    gathers ? "output_tensor_list" : "input_list");
  if (counts) {
    p.op.type = gathers ? OpType::allgatherv : OpType::reduce_scatterv;
    (gathers ? p.op.out_counts : p.op.in_counts) = *counts;
  }
  list_view = gathers ? p.staging.packed_output(list, own) : p.staging.packed_input(list);
  p.result = gathers ? list : own_list.vec();
}

// all_gather_into_tensor, reduce_scatter_tensor: the larger of the pair holds group size times
// the smaller's elements.
void plan_into_tensor(const Call& c, TorchPlan& p) {
  plan_pair(c, p);
  const at::Tensor& in = c.args.inputs[0];
  const at::Tensor& out = c.args.outputs[0];
  if (p.op.type == OpType::allgather) {
    require_times(out, in, c.size, "output", "input", c.name);
  } else {
    require_times(in, out, c.size, "input", "output", c.name);
  }
}

#if CHORUS_TORCH_COALESCED_TENSOR_OPS
// torch 2.x's coalescing manager: the pairs of plan_into_tensor as one coalesced op, all of one
// dtype (they travel as one buffer). Output i of an allgather is rank-major, every rank's input
// i in rank order; block r of input i of a reduce_scatter is reduced into rank r's output i, as
// the descriptor lays them out.
void plan_into_tensor_coalesced(const Call& c, TorchPlan& p) {
  const at::TensorList ins = c.args.inputs;
  const at::TensorList outs = c.args.outputs;
  const bool gathers = p.op.type == OpType::allgather;
  const at::TensorList small = gathers ? ins : outs;
  const at::TensorList large = gathers ? outs : ins;
  const char* small_name = gathers ? "inputs" : "outputs";
  const char* large_name = gathers ? "outputs" : "inputs";
  if (small.empty() || small.size() != large.size()) {
    throw InvalidArgument(op_prefix(c.name) + "expects as many " + large_name + " as " +
                          small_name + " (at least one); got " + std::to_string(large.size()) +
                          " and " + std::to_string(small.size()));
  }
  for (std::size_t i = 0; i < small.size(); ++i) {
    require_dense_cpu(small[i], c.name);
    require_dense_cpu(large[i], c.name);
    require_same_dtype(small[0], small[i], c.name);
    require_same_dtype(small[0], large[i], c.name);
    const std::string index = "[" + std::to_string(i) + "]";
    require_times(large[i], small[i], c.size, large_name + index, small_name + index, c.name);
  }
  for (std::size_t i = 0; i < ins.size(); ++i) {
    p.op.ins.push_back(p.staging.input(ins[i]));
    p.op.outs.push_back(p.staging.output(outs[i]));
  }
  p.result = outs.vec();
}
#endif

// One coalesced allgather of the inputs, each into a rank-major buffer of its own, whose
// blocks go to output_lists[r][i] (the column of input i).
void plan_allgather_coalesced(const Call& c, TorchPlan& p) {
  const at::TensorList inputs = c.args.inputs;
  const auto lists = c.args.output_lists;
  if (inputs.empty()) {
    throw InvalidArgument(op_prefix(c.name) + "got no input tensors");
  }
  if (static_cast<int>(lists.size()) != c.size) {
    throw InvalidArgument(op_prefix(c.name) + "expects one output list per rank (" +
                          std::to_string(c.size) + "), got " + std::to_string(lists.size()));
  }
  for (const auto& t : inputs) {
    require_dense_cpu(t, c.name);
    require_same_dtype(inputs[0], t, c.name);
  }
  for (const auto& list : lists) {
    if (list.size() != inputs.size()) {
      throw InvalidArgument(op_prefix(c.name) +
                            "each output list must hold one tensor per input (" +
                            std::to_string(inputs.size()) + ")");
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      require_all_like(list[i], inputs[i], "output_lists[r]", c.name);
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> column;
    for (const auto& list : lists) {
      column.push_back(list[i]);
    }
    p.op.ins.push_back(p.staging.input(inputs[i]));
    p.op.outs.push_back(p.staging.packed_output(column, inputs[i]));
  }
  for (const auto& list : lists) {
    p.result.insert(p.result.end(), list.begin(), list.end());
  }
}

void plan_gather(const Call& c, TorchPlan& p) {
  require_one_tensor(c.args.inputs.size(), c.name);
  const at::Tensor& in = c.args.inputs[0];
  p.op.in = p.staging.input(in);
  if (const auto* list = root_list(c, c.args.output_lists, in, "gather_list")) {
    p.op.out = p.staging.packed_output(*list, in);
    p.result = *list;
  }
}

void plan_scatter(const Call& c, TorchPlan& p) {
  require_one_tensor(c.args.outputs.size(), c.name);
  const at::Tensor& out = c.args.outputs[0];
  p.op.out = p.staging.output(out);
  if (const auto* list = root_list(c, c.args.input_lists, out, "scatter_list")) {
    p.op.in = p.staging.packed_input(*list);
  }
  p.result = c.args.outputs.vec();
}

// Rows split per rank (all_to_all_single): equal parts without splits, else all_to_allv.
void plan_alltoall_base(const Call& c, TorchPlan& p) {
  plan_pair(c, p);
  const at::Tensor& in = c.args.inputs[0];
  const at::Tensor& out = c.args.outputs[0];
  if (c.args.input_splits.empty() && c.args.output_splits.empty()) {
    if (in.numel() != out.numel() || in.numel() % c.size != 0) {
      throw InvalidArgument(op_prefix(c.name) +
                            "input and output need equal element counts divisible by the group "
                            "size; got " +
                            std::to_string(in.numel()) + " and " + std::to_string(out.numel()));
    }
  } else {
    p.op.type = OpType::all_to_allv;
    p.op.in_counts = split_rows(c, in, c.args.input_splits, "input");
    p.op.out_counts = split_rows(c, out, c.args.output_splits, "output");
  }
}

// One tensor per rank each way, packed into one buffer each way; tensors of different sizes
// run all_to_allv.
void plan_alltoall(const Call& c, TorchPlan& p) {
  const at::TensorList inputs = c.args.inputs;
  const at::TensorList outputs = c.args.outputs;
  const auto n = static_cast<std::size_t>(c.size);
  if (inputs.size() != n || outputs.size() != n) {
    throw InvalidArgument(op_prefix(c.name) + "needs one input and one output tensor per rank (" +
                          std::to_string(n) + "); got " + std::to_string(inputs.size()) + " and " +
                          std::to_string(outputs.size()));
  }
  for (std::size_t j = 0; j < n; ++j) {
    require_dense_cpu(inputs[j], c.name);
    require_dense_cpu(outputs[j], c.name);
    require_same_dtype(inputs[0], inputs[j], c.name);
    require_same_dtype(inputs[0], outputs[j], c.name);
  }
  std::vector<std::size_t> in_counts = numels(inputs);
  std::vector<std::size_t> out_counts = numels(outputs);
  const auto even = [&](std::size_t k) { return k == in_counts[0]; };
  if (!std::all_of(in_counts.begin(), in_counts.end(), even) ||
      !std::all_of(out_counts.begin(), out_counts.end(), even)) {
    p.op.type = OpType::all_to_allv;
    p.op.in_counts = std::move(in_counts);
    p.op.out_counts = std::move(out_counts);
  }
  p.op.in = p.staging.packed_input(inputs);
  p.op.out = p.staging.packed_output(outputs, inputs[0]);
  p.result = outputs.vec();
}

// send, recv: the message in `in`; a recv's is written back.
void plan_p2p(const Call& c, TorchPlan& p) {
  require_one_tensor(c.args.tensors.size(), c.name);
  if (c.args.tag < 0) {
    throw InvalidArgument(op_prefix(c.name) + "tag " + std::to_string(c.args.tag) + " is negative");
  }
  const at::Tensor& t = c.args.tensors[0];
  const bool receives = p.op.type == OpType::recv;
  p.op.in = receives ? p.staging.output(t) : p.staging.input(t);
  p.op.peer = c.args.peer;
  p.op.tag = static_cast<std::uint32_t>(c.args.tag);
  p.result = c.args.tensors.vec();
  // From any source, the Work's sourceRank() asks the chorus op who sent it.
  if (receives && c.args.peer != kAnySource) {
    p.source_rank = c.args.peer;
  }
}

void plan_barrier(const Call&, TorchPlan&) {}

using PlanFn = void (*)(const Call&, TorchPlan&);

struct TorchOpRule {
  TorchOp torch_op;
  const char* name;
  c10d::OpType work_type;
  OpType type;   // the chorus op; a plan function may pick its variable-size form
  bool rooted;   // takes the root from the options
  bool reduces;  // takes the ReduceOp and the thread's wire
  PlanFn plan;
};

// Indexed by TorchOp: the columns are TorchOpRule's, in order.
using W = c10d::OpType;
using T = OpType;
constexpr bool y = true;
constexpr bool n = false;
// clang-format off
constexpr TorchOpRule kTorchOpRules[] = {
  // torch op                                  name                               Work type                chorus op          root red  plan
  {TorchOp::broadcast,                        "broadcast",                       W::BROADCAST,            T::broadcast,      y,   n,   plan_in_place},
  {TorchOp::allreduce,                        "allreduce",                       W::ALLREDUCE,            T::allreduce,      n,   y,   plan_in_place},
  {TorchOp::allreduce_coalesced,              "allreduce_coalesced",             W::ALLREDUCE_COALESCED,  T::allreduce,      n,   y,   plan_allreduce_coalesced},
  {TorchOp::reduce,                           "reduce",                          W::REDUCE,               T::reduce,         y,   y,   plan_in_place},
  {TorchOp::allgather,                        "allgather",                       W::ALLGATHER,            T::allgather,      n,   n,   plan_per_rank_list},
  {TorchOp::allgather_into_tensor,            "allgather_into_tensor",           W::_ALLGATHER_BASE,      T::allgather,      n,   n,   plan_into_tensor},
  {TorchOp::allgather_coalesced,              "allgather_coalesced",             W::ALLGATHER_COALESCED,  T::allgather,      n,   n,   plan_allgather_coalesced},
  {TorchOp::gather,                           "gather",                          W::GATHER,               T::gather,         y,   n,   plan_gather},
  {TorchOp::scatter,                          "scatter",                         W::SCATTER,              T::scatter,        y,   n,   plan_scatter},
  {TorchOp::reduce_scatter,                   "reduce_scatter",                  W::REDUCE_SCATTER,       T::reduce_scatter, n,   y,   plan_per_rank_list},
  {TorchOp::reduce_scatter_tensor,            "reduce_scatter_tensor",           W::_REDUCE_SCATTER_BASE, T::reduce_scatter, n,   y,   plan_into_tensor},
  {TorchOp::alltoall_base,                    "alltoall_base",                   W::ALLTOALL_BASE,        T::all_to_all,     n,   n,   plan_alltoall_base},
  {TorchOp::alltoall,                         "alltoall",                        W::ALLTOALL,             T::all_to_all,     n,   n,   plan_alltoall},
  {TorchOp::send,                             "send",                            W::SEND,                 T::send,           n,   n,   plan_p2p},
  {TorchOp::recv,                             "recv",                            W::RECV,                 T::recv,           n,   n,   plan_p2p},
  {TorchOp::barrier,                          "barrier",                         W::BARRIER,              T::barrier,        n,   n,   plan_barrier},
#if CHORUS_TORCH_COALESCED_TENSOR_OPS
  {TorchOp::allgather_into_tensor_coalesced,  "allgather_into_tensor_coalesced", W::COALESCED,            T::allgather,      n,   n,   plan_into_tensor_coalesced},
  {TorchOp::reduce_scatter_tensor_coalesced,  "reduce_scatter_tensor_coalesced", W::COALESCED,            T::reduce_scatter, n,   y,   plan_into_tensor_coalesced},
#endif
};
// clang-format on

constexpr bool rows_in_torch_op_order() {
  for (std::size_t i = 0; i < std::size(kTorchOpRules); ++i) {
    if (static_cast<std::size_t>(kTorchOpRules[i].torch_op) != i) {
      return false;
    }
  }
  return true;
}
static_assert(rows_in_torch_op_order(), "kTorchOpRules: row i is the rule of TorchOp i");

// The descriptor's wire_dtype is for these three (the variable-size reduce_scatterv has none).
bool carries_wire(OpType type) {
  return type == OpType::allreduce || type == OpType::reduce_scatter || type == OpType::reduce;
}

}  // namespace

TorchPlan plan_torch_op(TorchOp op, const TorchArgs& args, int rank, int size,
                        std::optional<DataType> wire) {
  const TorchOpRule& rule = kTorchOpRules[static_cast<std::size_t>(op)];
  TorchPlan p{rule.name, rule.work_type, {}, Staging(rule.name), {}, -1};
  p.op.type = rule.type;
  p.op.timeout = chorus_timeout(args.timeout);
  if (rule.rooted) {
    require_root(args.root, size, rule.name);
    p.op.root = static_cast<int>(args.root);
  }
  rule.plan(Call{args, rule.name, rank, size}, p);
  if (rule.reduces) {
    p.op.op = chorus_reduce_op(args.reduce_op, p.staging.dtype(), rule.name);
    if (carries_wire(p.op.type)) {
      p.op.wire_dtype = wire;
    }
  }
  return p;
}

}  // namespace chorus::torch_bridge
