// SPDX-License-Identifier: BSD-3-Clause
// Tensor view helpers: slicing and overlap.
#include <cstdint>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/tensor.hpp>

namespace chorus {

Tensor Tensor::slice(std::size_t first, std::size_t count) const {
  if (first > count_ || count > count_ - first) {
    throw InvalidArgument(fmt::format(
        "Tensor::slice({}, {}) is out of range for a tensor of {} elements; pass first + count <= {}",
        first, count, count_, count_));
  }
  auto* base = static_cast<std::uint8_t*>(data_);
  return Tensor(base == nullptr ? nullptr : base + first * element_size(), count, dtype_, device_);
}

bool Tensor::overlaps(const Tensor& other) const noexcept {
  if (nbytes() == 0 || other.nbytes() == 0 || device_ != other.device_) {
    return false;
  }
  const auto a = reinterpret_cast<std::uintptr_t>(data_);
  const auto b = reinterpret_cast<std::uintptr_t>(other.data_);
  return a < b + other.nbytes() && b < a + nbytes();
}

}  // namespace chorus
