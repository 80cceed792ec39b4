// SPDX-License-Identifier: BSD-3-Clause
// Names and sizes of DataType, ReduceOp and DeviceType.
#include <array>
#include <string_view>

#include <chorus/types.hpp>

namespace chorus {

bool is_floating(DataType dtype) noexcept {
  return dtype == DataType::float16 || dtype == DataType::bfloat16 || dtype == DataType::float32 ||
         dtype == DataType::float64;
}

const char* to_string(DataType dtype) noexcept {
  static constexpr std::array<const char*, kNumDataTypes> kNames = {
      "int8",   "uint8",   "int32",    "uint32",  "int64",
      "uint64", "float16", "bfloat16", "float32", "float64"};
  const auto i = static_cast<std::size_t>(dtype);
  return i < kNames.size() ? kNames[i] : "?";
}

const char* to_string(ReduceOp op) noexcept {
  static constexpr std::array<const char*, kNumReduceOps> kNames = {"sum", "prod", "min", "max",
                                                                    "avg"};
  const auto i = static_cast<std::size_t>(op);
  return i < kNames.size() ? kNames[i] : "?";
}

const char* to_string(DeviceType type) noexcept {
  return type == DeviceType::cpu ? "cpu" : type == DeviceType::cuda ? "cuda" : "?";
}

std::optional<DataType> parse_data_type(std::string_view name) noexcept {
  struct Alias {
    std::string_view name;
    DataType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"int8", DataType::int8},         {"char", DataType::int8},
      {"uint8", DataType::uint8},       {"int32", DataType::int32},
      {"int", DataType::int32},         {"uint32", DataType::uint32},
      {"int64", DataType::int64},       {"uint64", DataType::uint64},
      {"float16", DataType::float16},   {"half", DataType::float16},
      {"bfloat16", DataType::bfloat16}, {"bf16", DataType::bfloat16},
      {"float32", DataType::float32},   {"float", DataType::float32},
      {"float64", DataType::float64},   {"double", DataType::float64},
  };
  for (const auto& alias : kAliases) {
    if (alias.name == name) {
      return alias.dtype;
    }
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (name == to_string(static_cast<ReduceOp>(i))) {
      return static_cast<ReduceOp>(i);
    }
  }
  return std::nullopt;
}

}  // namespace chorus
