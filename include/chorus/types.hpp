// SPDX-License-Identifier: BSD-3-Clause
// Element types, reduction operators and devices: the vocabulary every collective uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <chorus/export.hpp>

namespace chorus {

// Element type of a Tensor. float16 and bfloat16 are reduced in float32 and rounded once.
enum class DataType : std::uint8_t {
  int8,
  uint8,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
};
inline constexpr int kNumDataTypes = 10;

// Reduction operator. avg = sum, then divided by the group size (exact for floating types,
// truncating division for integer types).
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };
inline constexpr int kNumReduceOps = 5;

enum class DeviceType : std::uint8_t { cpu, cuda };

// Where a Tensor's memory lives. index is the CUDA ordinal; ignored for cpu.
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() noexcept { return {}; }
  static Device cuda(int index) noexcept { return {DeviceType::cuda, index}; }
  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
  friend bool operator!=(const Device& a, const Device& b) noexcept { return !(a == b); }
};

// Bytes per element: 1, 2, 4 or 8. Inline: every op asks for it several times.
constexpr std::size_t element_size(DataType dtype) noexcept {
  switch (dtype) {
    case DataType::int8:
    case DataType::uint8:
      return 1;
    case DataType::float16:
    case DataType::bfloat16:
      return 2;
    case DataType::int32:
    case DataType::uint32:
    case DataType::float32:
      return 4;
    case DataType::int64:
    case DataType::uint64:
    case DataType::float64:
      return 8;
  }
  return 1;
}
CHORUS_API bool is_floating(DataType dtype) noexcept;

// Lower-case names as written in this header ("float32", "sum", "cuda"); "?" if out of range.
CHORUS_API const char* to_string(DataType dtype) noexcept;
CHORUS_API const char* to_string(ReduceOp op) noexcept;
CHORUS_API const char* to_string(DeviceType type) noexcept;

// Inverse of to_string, also accepting the nccl-tests short names (float, half, bf16, double,
// int, uint8 ...). nullopt for an unknown name.
CHORUS_API std::optional<DataType> parse_data_type(std::string_view name) noexcept;
CHORUS_API std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept;

}  // namespace chorus
