// SPDX-License-Identifier: BSD-3-Clause
#include "torch_staging.hpp"

#include <utility>

#include "torch_convert.hpp"

namespace chorus::torch_bridge {

void Staging::check(const at::Tensor& t) {
  require_dense_cpu(t, op_);
  if (dtype_ == at::ScalarType::Undefined) {
    dtype_ = t.scalar_type();
  }
}

Tensor Staging::use(const at::Tensor& buffer) {
  keep_.push_back(buffer);
  return Tensor(buffer.data_ptr(), static_cast<std::size_t>(buffer.numel()),
                chorus_dtype(buffer.scalar_type(), op_));
}

Tensor Staging::input(const at::Tensor& t) {
  check(t);
  return use(t.is_contiguous() ? t : t.contiguous());
}

Tensor Staging::output(const at::Tensor& t, bool copy_back) {
  check(t);
  if (t.is_contiguous()) {
    return use(t);
  }
  at::Tensor copy = t.contiguous();
  if (copy_back) {
    unpacks_.push_back({copy, {t}});
  }
  return use(copy);
}

Tensor Staging::packed_input(at::TensorList list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) {
    check(t);
    flat.push_back(t.reshape({-1}));
  }
  return use(at::cat(flat, 0));
}

Tensor Staging::packed_output(at::TensorList list, const at::Tensor& like) {
  std::int64_t total = 0;
  for (const auto& t : list) {
    check(t);
    total += t.numel();
  }
  at::Tensor buffer = at::empty({total}, like.options());
  unpacks_.push_back({buffer, list.vec()});
  return use(buffer);
}

std::function<void()> Staging::finisher() {
  if (unpacks_.empty()) {
    return {};
  }
  return [unpacks = std::move(unpacks_)] {
    for (const Unpack& u : unpacks) {
      const at::Tensor flat = u.from.view({-1});
      std::int64_t offset = 0;
      for (const auto& t : u.to) {
        const std::int64_t n = t.numel();
        t.copy_(flat.narrow(0, offset, n).view(t.sizes()));
        offset += n;
      }
    }
  };
}

}  // namespace chorus::torch_bridge
