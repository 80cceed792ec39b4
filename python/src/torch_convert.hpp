// SPDX-License-Identifier: BSD-3-Clause
// Between torch and chorus: dtypes, reduction operators, timeouts, and tensors that chorus can
// read and write in place (contiguous CPU memory), staging a copy when a tensor is not.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <chorus/options.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace chorus::torch_bridge {

// "torch.float32", as Python spells the dtype.
std::string torch_dtype_name(at::ScalarType type);

// The chorus element type of a torch dtype. bool travels as uint8 (torch stores one byte per
// bool). Throws InvalidArgument naming the op and the dtype for types chorus cannot carry.
DataType chorus_dtype(at::ScalarType type, const char* op);

// The chorus reduction for a torch ReduceOp on `type`. As with torch's nccl backend, on bool
// tensors SUM is logical or (max) and PRODUCT logical and (min). Bitwise ops, PREMUL_SUM and
// AVG on bool throw InvalidArgument.
ReduceOp chorus_reduce_op(const c10d::ReduceOp& op, at::ScalarType type, const char* op_name);

// torch's "unset" (kUnsetTimeout, zero) means the group's default.
std::optional<Duration> chorus_timeout(std::chrono::milliseconds timeout);

// A torch tensor as chorus sees it: `buffer` is the tensor itself when it is contiguous CPU
// memory, else a contiguous copy that copy_back() writes into the user's tensor after the op.
struct Staged {
  at::Tensor user;
  at::Tensor buffer;
  Tensor view() const;  // chorus's view of buffer
  bool is_copy() const { return !user.is_same(buffer); }
  void copy_back() const {
    if (is_copy()) {
      user.copy_(buffer);
    }
  }
};

// Checks that t is a dense CPU tensor (the tcp backend's memory), then stages it.
Staged stage(const at::Tensor& t, const char* op);

// Requires exactly one tensor (one device per process: chorus's torch backend runs on CPU).
void require_one_tensor(std::size_t n, const char* op);

// Every tensor of `list` has the dtype and shape of `like` (as gloo requires); names the first
// that does not, with both shapes. `what` names the list ("output_tensor_list").
void require_all_like(const std::vector<at::Tensor>& list, const at::Tensor& like,
                      const char* what, const char* op);

// The tensors of `list` concatenated into one new contiguous 1-D tensor (of like's dtype).
at::Tensor flatten(const std::vector<at::Tensor>& list);
// Writes consecutive pieces of flat (1-D) into each tensor of `list`, in order.
void unflatten_into(const at::Tensor& flat, const std::vector<at::Tensor>& list);

}  // namespace chorus::torch_bridge
