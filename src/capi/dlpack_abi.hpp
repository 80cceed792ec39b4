// SPDX-License-Identifier: BSD-3-Clause
// The DLPack ABI constants and DLTensor layout chorus reads, so the library builds without
// dlpack.h; tests/capi/dlpack_test.cpp checks them against the real header.
#pragma once

#include "core/private.hpp"

#include <cstdint>

namespace chorus::dl {

// DLDeviceType values.
inline constexpr std::int32_t kCPU = 1;
inline constexpr std::int32_t kCUDA = 2;
inline constexpr std::int32_t kCUDAHost = 3;
inline constexpr std::int32_t kOpenCL = 4;
inline constexpr std::int32_t kVulkan = 7;
inline constexpr std::int32_t kMetal = 8;
inline constexpr std::int32_t kVPI = 9;
inline constexpr std::int32_t kROCM = 10;
inline constexpr std::int32_t kROCMHost = 11;
inline constexpr std::int32_t kExtDev = 12;
inline constexpr std::int32_t kCUDAManaged = 13;
inline constexpr std::int32_t kOneAPI = 14;
inline constexpr std::int32_t kWebGPU = 15;
inline constexpr std::int32_t kHexagon = 16;

// DLDataTypeCode values (kBool from DLPack 0.8, the float8 family from 1.0).
inline constexpr std::uint8_t kInt = 0;
inline constexpr std::uint8_t kUInt = 1;
inline constexpr std::uint8_t kFloat = 2;
inline constexpr std::uint8_t kOpaqueHandle = 3;
inline constexpr std::uint8_t kBfloat = 4;
inline constexpr std::uint8_t kComplex = 5;
inline constexpr std::uint8_t kBool = 6;
inline constexpr std::uint8_t kFirstFloat8 = 7;

// Layout of DLTensor (unchanged since DLPack 0.2): what chorus_tensor_from_dlpack reads.
struct Device {
  std::int32_t device_type;  // an enum in dlpack.h: int-sized
  std::int32_t device_id;
};
struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};

}  // namespace chorus::dl
