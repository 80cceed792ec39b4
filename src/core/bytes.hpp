// SPDX-License-Identifier: BSD-3-Clause
// Little-endian integer fields in wire formats (signature headers, tcp hellos, control
// frames): the same encoding on every host, no alignment needed. On a little-endian host a
// field is one unaligned load or store (a small op encodes and decodes several signatures).
#pragma once

#include "core/private.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace chorus {

// Writes the low `n` (<= 8) bytes of v at p, least significant first.
inline void put_le(std::uint8_t* p, std::uint64_t v, int n) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, static_cast<std::size_t>(n));
    return;
  }
  for (int i = 0; i < n; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

// Appends the low `n` bytes of v to out, least significant first.
inline void append_le(std::vector<std::uint8_t>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}

// Reads an `n`-byte (n <= 8) little-endian unsigned integer at p.
inline std::uint64_t get_le(const std::uint8_t* p, int n) noexcept {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, static_cast<std::size_t>(n));
    return v;
  }
  for (int i = 0; i < n; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

}  // namespace chorus
