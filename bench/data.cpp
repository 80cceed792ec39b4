// SPDX-License-Identifier: BSD-3-Clause
// Value patterns whose reductions are exact in every type, and element conversions.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common.hpp"

namespace bench {

const char* type_name(chorus::DataType dtype) {
  using chorus::DataType;
  switch (dtype) {
    case DataType::int8:
      return "int8";
    case DataType::uint8:
      return "uint8";
    case DataType::int32:
      return "int32";
    case DataType::uint32:
      return "uint32";
    case DataType::int64:
      return "int64";
    case DataType::uint64:
      return "uint64";
    case DataType::float16:
      return "half";
    case DataType::bfloat16:
      return "bfloat16";
    case DataType::float32:
      return "float";
    case DataType::float64:
      return "double";
  }
  return "?";
}

const char* op_name(chorus::ReduceOp op) { return chorus::to_string(op); }

namespace {

// The largest integer up to which every integer is exact in the type, capped so that sums of
// many ranks stay far from int64 overflow.
std::int64_t exact_limit(chorus::DataType dtype) {
  using chorus::DataType;
  switch (dtype) {
    case DataType::int8:
      return 127;
    case DataType::uint8:
      return 255;
    case DataType::float16:
      return 2048;
    case DataType::bfloat16:
      return 256;
    case DataType::float32:
      return std::int64_t{1} << 24;
    case DataType::int32:
    case DataType::uint32:
      return std::int64_t{1} << 30;
    case DataType::int64:
    case DataType::uint64:
    case DataType::float64:
      return std::int64_t{1} << 40;
  }
  return 127;
}

std::uint64_t mix(int rank, std::size_t index, int seed) {
  return static_cast<std::uint64_t>(index) * 131u + static_cast<std::uint64_t>(rank) * 977u +
         static_cast<std::uint64_t>(seed) * 7919u + 1u;
}

int floor_log2(std::int64_t v) {
  int b = 0;
  while ((std::int64_t{1} << (b + 1)) <= v) {
    ++b;
  }
  return b;
}

std::uint16_t float_to_half_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) {  // inf / nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  }
  if (exp >= 31) {
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (exp <= 0) {  // subnormal half (or zero)
    if (exp < -10) {
      return static_cast<std::uint16_t>(sign);
    }
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) {
      ++half;
    }
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) {
    ++half;  // may carry into the exponent: still correct rounding
  }
  return static_cast<std::uint16_t>(half);
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const std::uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant ? std::nanf("") : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= sign;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace

std::optional<chorus::DataType> wire_of(std::optional<chorus::DataType> wire,
                                        chorus::DataType dtype, chorus::ReduceOp op) {
  using chorus::DataType;
  if (!wire || (op != chorus::ReduceOp::sum && op != chorus::ReduceOp::avg)) {
    return std::nullopt;
  }
  if (dtype == DataType::float64) {
    return DataType::float32;
  }
  if (dtype == DataType::float32 && (*wire == DataType::bfloat16 || *wire == DataType::float16)) {
    return wire;
  }
  return std::nullopt;
}

std::int64_t input_value(const Pattern& p, int rank, std::size_t index) {
  const std::int64_t e = exact_limit(p.wire.value_or(p.dtype));
  const std::int64_t n = p.nranks;
  const std::uint64_t m = mix(rank, index, p.seed);
  if (!p.op || *p.op == chorus::ReduceOp::min || *p.op == chorus::ReduceOp::max) {
    return static_cast<std::int64_t>(m % static_cast<std::uint64_t>(e + 1));
  }
  switch (*p.op) {
    case chorus::ReduceOp::sum: {
      const std::int64_t limit = std::max<std::int64_t>(1, e / n);
      return static_cast<std::int64_t>(m % static_cast<std::uint64_t>(limit + 1));
    }
    case chorus::ReduceOp::prod: {
      // Powers of two: the product is 2^k with k <= min(nranks, log2(limit)).
      const int bits = floor_log2(e);
      return (rank < bits && m % 3 == 0) ? 2 : 1;
    }
    case chorus::ReduceOp::avg: {
      // The sum over ranks is a multiple of n, so sum / n is exact in every type.
      const std::uint64_t base_mix = mix(0, index, p.seed);
      if (e / n >= n - 1) {
        // a + 2 * ((rank + index) mod n): every rank differs; sum = n * a + n * (n - 1).
        const std::int64_t a_max = e / n - (n - 1);
        const std::int64_t a =
            static_cast<std::int64_t>(base_mix % static_cast<std::uint64_t>(a_max + 1));
        return a + 2 * static_cast<std::int64_t>((static_cast<std::uint64_t>(rank) + index) %
                                                 static_cast<std::uint64_t>(n));
      }
      // Many ranks, few exact integers: one rank per element adds n; sum = n * (a + 1).
      const std::int64_t a_max = std::max<std::int64_t>(0, e / n - 1);
      const std::int64_t a =
          static_cast<std::int64_t>(base_mix % static_cast<std::uint64_t>(a_max + 1));
      return a +
             (static_cast<std::uint64_t>(rank) == index % static_cast<std::uint64_t>(n) ? n : 0);
    }
    default:
      return 0;
  }
}

std::int64_t reduced_value(const Pattern& p, std::size_t index) {
  if (!p.op) {
    return input_value(p, 0, index);
  }
  std::int64_t acc = input_value(p, 0, index);
  for (int r = 1; r < p.nranks; ++r) {
    const std::int64_t v = input_value(p, r, index);
    switch (*p.op) {
      case chorus::ReduceOp::sum:
      case chorus::ReduceOp::avg:
        acc += v;
        break;
      case chorus::ReduceOp::prod:
        acc *= v;
        break;
      case chorus::ReduceOp::min:
        acc = std::min(acc, v);
        break;
      case chorus::ReduceOp::max:
        acc = std::max(acc, v);
        break;
    }
  }
  if (*p.op == chorus::ReduceOp::avg) {
    acc /= p.nranks;
  }
  return acc;
}

void store_value(chorus::DataType dtype, std::int64_t v, void* dst) {
  using chorus::DataType;
  switch (dtype) {
    case DataType::int8: {
      const auto x = static_cast<std::int8_t>(v);
      std::memcpy(dst, &x, 1);
      break;
    }
    case DataType::uint8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(dst, &x, 1);
      break;
    }
    case DataType::int32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(dst, &x, 4);
      break;
    }
    case DataType::uint32: {
      const auto x = static_cast<std::uint32_t>(v);
      std::memcpy(dst, &x, 4);
      break;
    }
    case DataType::int64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(dst, &x, 8);
      break;
    }
    case DataType::uint64: {
      const auto x = static_cast<std::uint64_t>(v);
      std::memcpy(dst, &x, 8);
      break;
    }
    case DataType::float16: {
      const auto x = float_to_half_bits(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      break;
    }
    case DataType::bfloat16: {
      const auto x = float_to_bf16_bits(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      break;
    }
    case DataType::float32: {
      const auto x = static_cast<float>(v);
      std::memcpy(dst, &x, 4);
      break;
    }
    case DataType::float64: {
      const auto x = static_cast<double>(v);
      std::memcpy(dst, &x, 8);
      break;
    }
  }
}

double load_value(chorus::DataType dtype, const void* src) {
  using chorus::DataType;
  switch (dtype) {
    case DataType::int8: {
      std::int8_t x;
      std::memcpy(&x, src, 1);
      return x;
    }
    case DataType::uint8: {
      std::uint8_t x;
      std::memcpy(&x, src, 1);
      return x;
    }
    case DataType::int32: {
      std::int32_t x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case DataType::uint32: {
      std::uint32_t x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case DataType::int64: {
      std::int64_t x;
      std::memcpy(&x, src, 8);
      return static_cast<double>(x);
    }
    case DataType::uint64: {
      std::uint64_t x;
      std::memcpy(&x, src, 8);
      return static_cast<double>(x);
    }
    case DataType::float16: {
      std::uint16_t x;
      std::memcpy(&x, src, 2);
      return half_bits_to_float(x);
    }
    case DataType::bfloat16: {
      std::uint16_t x;
      std::memcpy(&x, src, 2);
      return bf16_bits_to_float(x);
    }
    case DataType::float32: {
      float x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case DataType::float64: {
      double x;
      std::memcpy(&x, src, 8);
      return x;
    }
  }
  return 0;
}

}  // namespace bench
