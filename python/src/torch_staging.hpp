// SPDX-License-Identifier: BSD-3-Clause
// The tensors of one torch call as chorus reads and writes them. chorus works on contiguous CPU
// memory; torch hands over any dense tensor, and lists of them. Each method checks one operand,
// returns chorus's view of it (the tensor itself, a contiguous copy, or one buffer for a whole
// list) and notes what the op needs kept alive and what goes back into the user's tensors when
// it completes.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <chorus/tensor.hpp>

namespace chorus::torch_bridge {

class Staging {
 public:
  // `op` names the torch op in messages.
  explicit Staging(const char* op) : op_(op) {}

  // An input: the tensor itself when it is contiguous, else a contiguous copy.
  Tensor input(const at::Tensor& t);
  // An output (or an in-place tensor): as input(), and when the op completes a copy goes back
  // into t, unless `copy_back` is false (reduce's non-root ranks receive nothing).
  Tensor output(const at::Tensor& t, bool copy_back = true);
  // The tensors of `list` concatenated into one new 1-D buffer.
  Tensor packed_input(at::TensorList list);
  // A new 1-D buffer of the list's elements (of like's dtype), whose consecutive pieces go into
  // the tensors of `list`, in order, when the op completes.
  Tensor packed_output(at::TensorList list, const at::Tensor& like);

  // The dtype of the first tensor staged (a torch ReduceOp means another thing on bool).
  at::ScalarType dtype() const { return dtype_; }
  // What ChorusWork::start takes: the copies back (empty when there are none), and the buffers
  // the op reads and writes, kept until it completes.
  std::function<void()> finisher();
  std::vector<at::Tensor> take_keep() { return std::move(keep_); }

 private:
  // Elements of `from` (contiguous), in order, into the tensors of `to`.
  struct Unpack {
    at::Tensor from;
    std::vector<at::Tensor> to;
  };
  void check(const at::Tensor& t);
  Tensor use(const at::Tensor& buffer);

  const char* op_;
  at::ScalarType dtype_ = at::ScalarType::Undefined;
  std::vector<at::Tensor> keep_;
  std::vector<Unpack> unpacks_;
};

}  // namespace chorus::torch_bridge
