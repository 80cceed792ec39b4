// SPDX-License-Identifier: BSD-3-Clause
// The DataType and ReduceOp mapping to NCCL, with the version gates of nccl_features.hpp.
#include "nccl/nccl_types.hpp"

#include <string>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "nccl/nccl_features.hpp"

namespace chorus::nccl {

std::optional<ncclDataType_t> to_nccl(DataType dtype) noexcept {
  switch (dtype) {
    case DataType::int8:
      return ncclInt8;
    case DataType::uint8:
      return ncclUint8;
    case DataType::int32:
      return ncclInt32;
    case DataType::uint32:
      return ncclUint32;
    case DataType::int64:
      return ncclInt64;
    case DataType::uint64:
      return ncclUint64;
    case DataType::float16:
      return ncclFloat16;
    case DataType::bfloat16:
#if CHORUS_NCCL_HAS_BF16
      return ncclBfloat16;
#else
      return std::nullopt;
#endif
    case DataType::float32:
      return ncclFloat32;
    case DataType::float64:
      return ncclFloat64;
  }
  return std::nullopt;
}

std::optional<ncclRedOp_t> to_nccl(ReduceOp op, DataType dtype) noexcept {
  if (!to_nccl(dtype)) {
    return std::nullopt;
  }
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::prod:
      return ncclProd;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      // NCCL divides floats by multiplying each input by 1/n before summing, and integers by
      // dividing the sum (truncating), which is chorus's avg contract for both.
#if CHORUS_NCCL_HAS_AVG
      return ncclAvg;
#else
      return std::nullopt;
#endif
  }
  return std::nullopt;
}

ncclDataType_t require_nccl_type(DataType dtype, const std::string& where) {
  if (auto type = to_nccl(dtype)) {
    return *type;
  }
  throw InvalidArgument(fmt::format(
      "{}: dtype {} is not supported by this NCCL ({}.{}.{}); use float32, float16 or another "
      "type NCCL supports, or upgrade NCCL",
      where, to_string(dtype), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
}

ncclRedOp_t require_nccl_op(ReduceOp op, DataType dtype, const std::string& where) {
  require_nccl_type(dtype, where);
  if (auto red = to_nccl(op, dtype)) {
    return *red;
  }
  throw InvalidArgument(fmt::format(
      "{}: reduce op {} on {} is not supported by this NCCL ({}.{}.{}); use sum and divide "
      "yourself, or upgrade NCCL",
      where, to_string(op), to_string(dtype), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
}

}  // namespace chorus::nccl
