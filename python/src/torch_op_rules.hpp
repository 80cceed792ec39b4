// SPDX-License-Identifier: BSD-3-Clause
// torch's collective calls as chorus ops: each c10d Backend method hands its arguments to
// plan_torch_op(), which turns them into one OpDescriptor and the staging of the user's tensors
// around it, through one table (torch_op_rules.cpp) as src/core/op_rules.cpp is for chorus's
// own shape rules. The checks here are torch's conventions (one CPU tensor per call, lists of
// one tensor per rank, gloo's shapes); the descriptor's own rules are checked by
// ProcessGroup::run().
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <chorus/process_group.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "torch_base.hpp"
#include "torch_staging.hpp"

namespace chorus::torch_bridge {

// The torch calls the bridge serves: the rows of the table, one per c10d Backend method (the
// names are those of torch's Python calls, as messages give them).
enum class TorchOp {
  broadcast,
  allreduce,
  allreduce_coalesced,
  reduce,
  allgather,
  allgather_into_tensor,
  allgather_coalesced,
  gather,
  scatter,
  reduce_scatter,
  reduce_scatter_tensor,
  alltoall_base,
  alltoall,
  send,
  recv,
  barrier,
#if CHORUS_TORCH_COALESCED_TENSOR_OPS
  allgather_into_tensor_coalesced,
  reduce_scatter_tensor_coalesced,
#endif
};

// torch's arguments of one call, borrowed from it: each Backend method fills the fields its
// signature has, and the rest keep their defaults.
struct TorchArgs {
  at::TensorList tensors;  // in place: broadcast, allreduce(_coalesced), reduce, send, recv
  at::TensorList inputs;
  at::TensorList outputs;
  c10::ArrayRef<std::vector<at::Tensor>> input_lists;   // scatter, reduce_scatter
  c10::ArrayRef<std::vector<at::Tensor>> output_lists;  // allgather(_coalesced), gather
  c10::ArrayRef<std::int64_t> input_splits;             // alltoall_base: rows per rank
  c10::ArrayRef<std::int64_t> output_splits;
  c10d::ReduceOp reduce_op;
  std::int64_t root = 0;
  int peer = -1;  // send: the destination; recv: the source, or kAnySource
  int tag = 0;
  std::chrono::milliseconds timeout{0};  // torch's unset: the group's
};

// One torch call as a chorus op.
struct TorchPlan {
  const char* name;        // the torch op, in messages and in the Work's errors
  c10d::OpType work_type;  // the Work's type, as torch's own backends report it
  OpDescriptor op;
  Staging staging;
  std::vector<at::Tensor> result;  // the Work's result()
  int source_rank = -1;            // a recv's sender, when named
};

// Checks torch's arguments of `op` on a rank of a group and describes the chorus op. `wire` is
// the wire of this thread's reductions (chorus.torch.wire_dtype()). Throws InvalidArgument
// naming the op and what to fix.
TorchPlan plan_torch_op(TorchOp op, const TorchArgs& args, int rank, int size,
                        std::optional<DataType> wire);

}  // namespace chorus::torch_bridge
