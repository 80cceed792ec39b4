// SPDX-License-Identifier: BSD-3-Clause
// from_dlpack(): a chorus Tensor viewing a DLPack DLTensor (PyTorch, JAX, CuPy, NumPy interop).
//
// Header-only over the caller's DLTensor type: include <dlpack/dlpack.h> yourself, then call
// chorus::from_dlpack(dl_tensor). Neither building chorus nor including this header needs
// dlpack.h; the template only reads the DLTensor fields every DLPack version has (the layout
// is ABI-stable since DLPack 0.2).
#pragma once

#include <cstdint>
#include <type_traits>

#include <chorus/export.hpp>
#include <chorus/tensor.hpp>

namespace chorus {

namespace detail {
// The DLTensor fields chorus reads, in a chorus-owned struct (so the checks live, once, in the
// library and the C ABI shares them).
struct DLTensorFields {
  void* data = nullptr;
  std::int32_t device_type = 0;  // DLDeviceType: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 ...
  std::int32_t device_id = 0;
  std::int32_t ndim = 0;
  std::uint8_t code = 0;  // DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 ...
  std::uint8_t bits = 0;
  std::uint16_t lanes = 0;
  const std::int64_t* shape = nullptr;
  const std::int64_t* strides = nullptr;  // in elements; nullptr = compact row-major
  std::uint64_t byte_offset = 0;
};
// Validates and converts; throws InvalidArgument saying what is unsupported and what to do
// (fields == nullptr: a null DLTensor pointer was passed).
CHORUS_API Tensor tensor_from_dlpack_fields(const DLTensorFields* fields);
}  // namespace detail

// A Tensor viewing t's elements (data + byte_offset, product of shape elements). Borrowed: the
// DLTensor's owner keeps the memory alive until every Work using the view completed.
// Throws InvalidArgument for non-contiguous strides (call .contiguous() first), for dtypes
// chorus has no type for (complex, bool, float8, int16, vector lanes > 1) and for devices other
// than CPU (kDLCPU, kDLCUDAHost) and CUDA (kDLCUDA, kDLCUDAManaged).
template <class DLTensorT, std::enable_if_t<!std::is_pointer_v<DLTensorT>, int> = 0>
Tensor from_dlpack(const DLTensorT& t) {
  detail::DLTensorFields f;
  f.data = t.data;
  f.device_type = static_cast<std::int32_t>(t.device.device_type);
  f.device_id = static_cast<std::int32_t>(t.device.device_id);
  f.ndim = static_cast<std::int32_t>(t.ndim);
  f.code = static_cast<std::uint8_t>(t.dtype.code);
  f.bits = static_cast<std::uint8_t>(t.dtype.bits);
  f.lanes = static_cast<std::uint16_t>(t.dtype.lanes);
  static_assert(
      sizeof(*t.shape) == sizeof(std::int64_t) && sizeof(*t.strides) == sizeof(std::int64_t),
      "DLTensor shape and strides are 64-bit integers");
  f.shape = reinterpret_cast<const std::int64_t*>(t.shape);
  f.strides = reinterpret_cast<const std::int64_t*>(t.strides);
  f.byte_offset = static_cast<std::uint64_t>(t.byte_offset);
  return detail::tensor_from_dlpack_fields(&f);
}

// Same, through a pointer (DLManagedTensor::dl_tensor, or what a framework hands out).
template <class DLTensorT>
Tensor from_dlpack(const DLTensorT* t) {
  if (t == nullptr) {
    return detail::tensor_from_dlpack_fields(nullptr);  // throws InvalidArgument
  }
  return from_dlpack(*t);
}

}  // namespace chorus
