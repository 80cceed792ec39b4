// SPDX-License-Identifier: BSD-3-Clause
// float16 and bfloat16 <-> float32 conversions (round-to-nearest-even, NaN stays NaN).
#pragma once

#include "core/private.hpp"

#include <bit>
#include <cstdint>

namespace chorus {

// IEEE binary16 bits -> float. Exact (every half is a float). Subnormal halves go through a
// float multiply by 2^112, which is exact and avoids a branch per element.
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  // Infinity and NaN keep their payload; the multiply above would have scaled them wrongly.
  bits = em >= 0x7c00u ? (0x7f800000u | ((em & 0x3ffu) << 13)) : bits;
  return std::bit_cast<float>(bits | sign);
}

// float -> IEEE binary16 bits, rounding to nearest even; overflow gives infinity, NaN stays a
// (quiet) NaN with the sign kept.
inline std::uint16_t float_to_half(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  std::uint32_t out;
  if (x >= 0x47800000u) {  // |f| >= 65536 (or inf/nan): everything here rounds to inf
    out = x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (x < 0x38800000u) {  // |f| < 2^-14: half subnormal (or zero)
    // Adding 0.5 makes the FPU round to a multiple of 2^-24 (ulp of 0.5) with ties to even;
    // the low bits of the sum are then the subnormal's mantissa.
    const float t = std::bit_cast<float>(x) + 0.5f;
    out = std::bit_cast<std::uint32_t>(t) - 0x3f000000u;
  } else {
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry
    // out of the mantissa correctly bumps the exponent (up to infinity).
    const std::uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;
    out = x >> 13;
  }
  return static_cast<std::uint16_t>(out | sign);
}

// bfloat16 bits -> float (exact).
inline float bfloat16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// float -> bfloat16 bits, rounding to nearest even; NaN stays a quiet NaN.
inline std::uint16_t float_to_bfloat16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  }
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace chorus
