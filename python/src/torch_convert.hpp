// SPDX-License-Identifier: BSD-3-Clause
// Between torch and chorus: dtypes, reduction operators, timeouts, and the checks of torch's
// conventions that every op shares (one CPU tensor per call, roots, lists of one tensor per rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <chorus/options.hpp>
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

// "chorus: allgather: ", the start of every message the bridge throws.
std::string op_prefix(const char* op);

// Throws unless t is a dense CPU tensor of a dtype chorus carries (the tcp backend's memory).
void require_dense_cpu(const at::Tensor& t, const char* op);

// Requires exactly one tensor (one device per process: chorus's torch backend runs on CPU).
void require_one_tensor(std::size_t n, const char* op);

// root is a rank of a group of `size`.
void require_root(std::int64_t root, int size, const char* op);

// A list of one tensor per rank has `size` entries; `what` names it ("the output list").
void require_one_per_rank(std::size_t n, int size, const char* what, const char* op);

void require_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op);

// `large` holds `factor` times `small`'s elements (all_gather_into_tensor's output,
// reduce_scatter_tensor's input); the names say which is which ("output", "inputs[2]").
void require_times(const at::Tensor& large, const at::Tensor& small, std::int64_t factor,
                   const std::string& large_name, const std::string& small_name, const char* op);

// Every tensor of `list` has the dtype and shape of `like` (as gloo requires); names the first
// that does not, with both shapes. `what` names the list ("output_tensor_list").
void require_all_like(at::TensorList list, const at::Tensor& like, const char* what,
                      const char* op);

}  // namespace chorus::torch_bridge
