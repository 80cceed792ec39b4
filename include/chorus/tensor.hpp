// SPDX-License-Identifier: BSD-3-Clause
// Tensor: a non-owning view of contiguous elements in CPU or CUDA memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <chorus/export.hpp>
#include <chorus/types.hpp>

namespace chorus {

namespace detail {
template <class T>
constexpr DataType data_type_of() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::int8_t>) {
    return DataType::int8;
  } else if constexpr (std::is_same_v<U, std::uint8_t>) {
    return DataType::uint8;
  } else if constexpr (std::is_same_v<U, std::int32_t>) {
    return DataType::int32;
  } else if constexpr (std::is_same_v<U, std::uint32_t>) {
    return DataType::uint32;
  } else if constexpr (std::is_same_v<U, std::int64_t>) {
    return DataType::int64;
  } else if constexpr (std::is_same_v<U, std::uint64_t>) {
    return DataType::uint64;
  } else if constexpr (std::is_same_v<U, float>) {
    return DataType::float32;
  } else if constexpr (std::is_same_v<U, double>) {
    return DataType::float64;
  } else {
    static_assert(sizeof(T) == 0,
                  "Tensor::of<T>: T has no chorus DataType; use the explicit constructor");
    return DataType::uint8;
  }
}
}  // namespace detail

// Non-owning view of `count` contiguous elements of `dtype` at `data` on `device`.
// Borrowed: the caller keeps the memory alive, and does not write it, until the Work of every
// op that uses it has completed. Copying a Tensor copies the view, never the data.
class CHORUS_API Tensor {
 public:
  Tensor() = default;  // empty view: count 0, no data
  Tensor(void* data, std::size_t count, DataType dtype, Device device = {}) noexcept
      : data_(data), count_(count), dtype_(dtype), device_(device) {}

  // Tensor::of(vec.data(), vec.size()) for float, double and the fixed-width integers.
  template <class T>
  static Tensor of(T* data, std::size_t count, Device device = {}) noexcept {
    return Tensor(const_cast<std::remove_cv_t<T>*>(data), count, detail::data_type_of<T>(), device);
  }

  void* data() const noexcept { return data_; }
  std::size_t count() const noexcept { return count_; }
  DataType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  std::size_t element_size() const noexcept { return chorus::element_size(dtype_); }
  std::size_t nbytes() const noexcept { return count_ * chorus::element_size(dtype_); }
  bool is_cpu() const noexcept { return device_.type == DeviceType::cpu; }
  bool is_cuda() const noexcept { return device_.type == DeviceType::cuda; }

  // Elements [first, first + count). Throws InvalidArgument if out of range.
  Tensor slice(std::size_t first, std::size_t count) const;

  // Same memory, same dtype and device (used to tell in-place from out-of-place).
  bool same_view(const Tensor& other) const noexcept {
    return data_ == other.data_ && count_ == other.count_ && dtype_ == other.dtype_ &&
           device_ == other.device_;
  }
  // True if the byte ranges of the two views intersect (both non-empty).
  bool overlaps(const Tensor& other) const noexcept;

 private:
  void* data_ = nullptr;
  std::size_t count_ = 0;
  DataType dtype_ = DataType::uint8;
  Device device_{};
};

}  // namespace chorus
