// SPDX-License-Identifier: BSD-3-Clause
// from_dlpack's checks (C++ API and C ABI share them): contiguity, dtype, device, byte_offset.
#include <chorus/dlpack.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chorus/errors.hpp>

#include "capi/dlpack_abi.hpp"
#include "capi/extent.hpp"

namespace chorus {
namespace {

// "complex64", "bool8", "float8 (e4m3 and kin)": how a user would name the DLPack dtype.
std::string dl_dtype_name(std::uint8_t code, std::uint8_t bits) {
  switch (code) {
    case dl::kInt:
      return fmt::format("int{}", bits);
    case dl::kUInt:
      return fmt::format("uint{}", bits);
    case dl::kFloat:
      return fmt::format("float{}", bits);
    case dl::kOpaqueHandle:
      return "opaque handle";
    case dl::kBfloat:
      return fmt::format("bfloat{}", bits);
    case dl::kComplex:
      return fmt::format("complex{}", bits);
    case dl::kBool:
      return fmt::format("bool{}", bits);
    default:
      return code >= dl::kFirstFloat8 ? "a float8/float6/float4 type" : "an unknown type";
  }
}

std::optional<DataType> to_data_type(std::uint8_t code, std::uint8_t bits) {
  switch (code) {
    case dl::kInt:
      return bits == 8    ? DataType::int8
             : bits == 32 ? DataType::int32
             : bits == 64 ? DataType::int64
                          : std::optional<DataType>{};
    case dl::kUInt:
      return bits == 8    ? DataType::uint8
             : bits == 32 ? DataType::uint32
             : bits == 64 ? DataType::uint64
                          : std::optional<DataType>{};
    case dl::kFloat:
      return bits == 16   ? DataType::float16
             : bits == 32 ? DataType::float32
             : bits == 64 ? DataType::float64
                          : std::optional<DataType>{};
    case dl::kBfloat:
      return bits == 16 ? DataType::bfloat16 : std::optional<DataType>{};
    default:
      return std::nullopt;
  }
}

std::optional<Device> to_device(std::int32_t type, std::int32_t id) {
  switch (type) {
    case dl::kCPU:
    case dl::kCUDAHost:  // pinned host memory: a CPU buffer for every chorus backend
      return Device::cpu();
    case dl::kCUDA:
    case dl::kCUDAManaged:
      return Device::cuda(id);
    default:
      return std::nullopt;
  }
}

const char* dl_device_name(std::int32_t type) {
  switch (type) {
    case dl::kOpenCL:
      return "OpenCL";
    case dl::kVulkan:
      return "Vulkan";
    case dl::kMetal:
      return "Metal";
    case dl::kVPI:
      return "VPI";
    case dl::kROCM:
      return "ROCm";
    case dl::kROCMHost:
      return "ROCm host";
    case dl::kExtDev:
      return "extension device";
    case dl::kOneAPI:
      return "oneAPI";
    case dl::kWebGPU:
      return "WebGPU";
    case dl::kHexagon:
      return "Hexagon";
    default:
      return "unknown";
  }
}

}  // namespace

namespace detail {

Tensor tensor_from_dlpack_fields(const DLTensorFields* fields) {
  if (fields == nullptr) {
    throw InvalidArgument(
        "from_dlpack: the DLTensor pointer is null; pass the address of a DLTensor");
  }
  const DLTensorFields& f = *fields;
  if (f.lanes != 1) {
    throw InvalidArgument(fmt::format(
        "from_dlpack: vector dtype ({} x {} lanes) is not supported; chorus takes scalar "
        "elements (lanes 1): reinterpret the tensor as {} scalars first",
        dl_dtype_name(f.code, f.bits), f.lanes, f.lanes));
  }
  const std::optional<DataType> dtype = to_data_type(f.code, f.bits);
  if (!dtype) {
    throw InvalidArgument(fmt::format(
        "from_dlpack: dtype {} (DLPack code {}, {} bits) is not supported by chorus, which takes "
        "int8/32/64, uint8/32/64, float16/32/64 and bfloat16; convert the tensor (for example "
        "to float32) first",
        dl_dtype_name(f.code, f.bits), f.code, f.bits));
  }
  const std::optional<Device> device = to_device(f.device_type, f.device_id);
  if (!device) {
    throw InvalidArgument(fmt::format(
        "from_dlpack: device type {} ({}) is not supported; chorus takes CPU (kDLCPU, "
        "kDLCUDAHost) and CUDA (kDLCUDA, kDLCUDAManaged) tensors: copy it to one of those first",
        f.device_type, dl_device_name(f.device_type)));
  }
  if (f.ndim < 0 || (f.ndim > 0 && f.shape == nullptr)) {
    throw InvalidArgument(
        fmt::format("from_dlpack: ndim is {} but shape is {}; the DLTensor is malformed", f.ndim,
                    f.shape == nullptr ? "null" : "set"));
  }
  std::size_t count = 1;
  for (int i = 0; i < f.ndim; ++i) {
    if (f.shape[i] < 0) {
      throw InvalidArgument(fmt::format(
          "from_dlpack: shape[{}] is {}; dimensions cannot be negative", i, f.shape[i]));
    }
    const auto extent = static_cast<std::size_t>(f.shape[i]);
    if (extent != 0 && count > std::numeric_limits<std::size_t>::max() / extent) {
      throw InvalidArgument(
          fmt::format("from_dlpack: the shape's element count overflows at shape[{}] = {}; "
                      "the DLTensor is malformed",
                      i, f.shape[i]));
    }
    count *= extent;
  }
  if (f.strides != nullptr && count > 0) {
    // Compact row-major: stride[i] = product of shape[i+1:]. A dimension of extent 1 may have
    // any stride (frameworks leave arbitrary values there), so it is skipped.
    std::int64_t expected = 1;
    bool compact = true;
    for (int i = f.ndim - 1; i >= 0; --i) {
      if (f.shape[i] != 1 && f.strides[i] != expected) {
        compact = false;
        break;
      }
      expected *= f.shape[i];
    }
    if (!compact) {
      std::vector<std::int64_t> shape(f.shape, f.shape + f.ndim);
      std::vector<std::int64_t> strides(f.strides, f.strides + f.ndim);
      std::vector<std::int64_t> want(static_cast<std::size_t>(f.ndim));
      std::int64_t s = 1;
      for (int i = f.ndim - 1; i >= 0; --i) {
        want[static_cast<std::size_t>(i)] = s;
        s *= f.shape[i];
      }
      throw InvalidArgument(fmt::format(
          "from_dlpack: the tensor is not contiguous: shape [{}] with strides [{}] elements, but "
          "chorus needs compact row-major strides [{}]; call .contiguous() (or copy) first",
          fmt::join(shape, ", "), fmt::join(strides, ", "), fmt::join(want, ", ")));
    }
  }
  if (f.data == nullptr && count > 0) {
    throw InvalidArgument(
        fmt::format("from_dlpack: data is null but the tensor has {} elements", count));
  }
  // byte_offset counts from data (CUDA pointers included: adding to a device address is fine).
  if (f.data != nullptr && reinterpret_cast<std::uintptr_t>(f.data) > UINTPTR_MAX - f.byte_offset) {
    throw InvalidArgument(
        fmt::format("from_dlpack: byte_offset {} from data {} runs past the end of the address "
                    "space; the DLTensor is malformed",
                    f.byte_offset, f.data));
  }
  void* data = f.data == nullptr ? nullptr : static_cast<char*>(f.data) + f.byte_offset;
  capi::check_extent(data, count, *dtype, "from_dlpack");
  return Tensor(data, count, *dtype, *device);
}

}  // namespace detail
}  // namespace chorus
