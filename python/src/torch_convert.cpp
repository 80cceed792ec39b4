// SPDX-License-Identifier: BSD-3-Clause
#include "torch_convert.hpp"

#include <chorus/errors.hpp>

namespace chorus::torch_bridge {

std::string op_prefix(const char* op) { return std::string("chorus: ") + op + ": "; }

std::string torch_dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    default:
      return std::string("torch ") + c10::toString(type);
  }
}

DataType chorus_dtype(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat:
      return DataType::float32;
    case at::kDouble:
      return DataType::float64;
    case at::kHalf:
      return DataType::float16;
    case at::kBFloat16:
      return DataType::bfloat16;
    case at::kChar:
      return DataType::int8;
    case at::kByte:
      return DataType::uint8;
    case at::kBool:
      return DataType::uint8;
    case at::kInt:
      return DataType::int32;
    case at::kLong:
      return DataType::int64;
    default:
      throw InvalidArgument(op_prefix(op) + "tensors of dtype " + torch_dtype_name(type) +
                            " are not supported (chorus carries float16, bfloat16, float32, "
                            "float64, int8, uint8, int32, int64 and bool)");
  }
}

ReduceOp chorus_reduce_op(const c10d::ReduceOp& op, at::ScalarType type, const char* op_name) {
  const bool logical = type == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return logical ? ReduceOp::max : ReduceOp::sum;
    case c10d::ReduceOp::PRODUCT:
      return logical ? ReduceOp::min : ReduceOp::prod;
    case c10d::ReduceOp::MIN:
      return ReduceOp::min;
    case c10d::ReduceOp::MAX:
      return ReduceOp::max;
    case c10d::ReduceOp::AVG:
      if (logical) {
        throw InvalidArgument(op_prefix(op_name) + "ReduceOp.AVG is not defined on bool tensors");
      }
      return ReduceOp::avg;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      throw InvalidArgument(op_prefix(op_name) +
                            "bitwise ReduceOps (BAND, BOR, BXOR) are not supported; on bool "
                            "tensors use MAX (or) and MIN (and)");
    default:
      throw InvalidArgument(op_prefix(op_name) +
                            "this ReduceOp is not supported (chorus reduces with SUM, PRODUCT, "
                            "MIN, MAX and AVG)");
  }
}

std::optional<Duration> chorus_timeout(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero()) {
    return std::nullopt;
  }
  return std::chrono::duration_cast<Duration>(timeout);
}

void require_dense_cpu(const at::Tensor& t, const char* op) {
  if (!t.defined()) {
    throw InvalidArgument(op_prefix(op) + "got an undefined tensor");
  }
  if (!t.device().is_cpu()) {
    throw InvalidArgument(op_prefix(op) + "tensor is on " + t.device().str() +
                          "; the chorus torch backend runs the tcp backend on CPU tensors");
  }
  if (t.layout() != at::kStrided) {
    throw InvalidArgument(op_prefix(op) + "only dense (strided) tensors are supported");
  }
  chorus_dtype(t.scalar_type(), op);
}

void require_one_tensor(std::size_t n, const char* op) {
  if (n != 1) {
    throw InvalidArgument(op_prefix(op) + "expects exactly one tensor per call, got " +
                          std::to_string(n) +
                          " (the chorus torch backend runs one CPU device per process)");
  }
}

void require_root(std::int64_t root, int size, const char* op) {
  if (root < 0 || root >= size) {
    throw InvalidArgument(op_prefix(op) + "root rank " + std::to_string(root) +
                          " is outside the group (size " + std::to_string(size) + ")");
  }
}

void require_one_per_rank(std::size_t n, int size, const char* what, const char* op) {
  if (n != static_cast<std::size_t>(size)) {
    throw InvalidArgument(op_prefix(op) + what + " has " + std::to_string(n) +
                          " tensors; the group has " + std::to_string(size) + " ranks");
  }
}

void require_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  if (a.scalar_type() != b.scalar_type()) {
    throw InvalidArgument(op_prefix(op) + "input is " + torch_dtype_name(a.scalar_type()) +
                          " but output is " + torch_dtype_name(b.scalar_type()));
  }
}

void require_times(const at::Tensor& large, const at::Tensor& small, std::int64_t factor,
                   const std::string& large_name, const std::string& small_name, const char* op) {
  if (large.numel() != factor * small.numel()) {
    throw InvalidArgument(op_prefix(op) + large_name + " has " + std::to_string(large.numel()) +
                          " elements; expected group size " + std::to_string(factor) + " x " +
                          small_name + "'s " + std::to_string(small.numel()));
  }
}

namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "(";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(sizes[i]);
  }
  return text + (sizes.size() == 1 ? ",)" : ")");
}

}  // namespace

void require_all_like(at::TensorList list, const at::Tensor& like, const char* what,
                      const char* op) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    // The shape, not only the element count: each tensor of the list receives (or sends) one
    // rank's copy of `like`, and a (5, 4) filled from a (4, 5) would hold the elements in
    // another arrangement without a word (gloo refuses it too: "invalid tensor size").
    if (t.scalar_type() != like.scalar_type() || t.sizes() != like.sizes()) {
      throw InvalidArgument(
          op_prefix(op) + what + "[" + std::to_string(i) + "] is " +
          torch_dtype_name(t.scalar_type()) + " of shape " + shape_text(t.sizes()) + "; expected " +
          torch_dtype_name(like.scalar_type()) + " of shape " + shape_text(like.sizes()) +
          " like the input (invalid tensor size: reshape it, or use the "
          "_into_tensor / _tensor variant, which takes any shape of the "
          "right element count)");
    }
  }
}

}  // namespace chorus::torch_bridge
