// SPDX-License-Identifier: BSD-3-Clause
// Little-endian integer fields in wire formats (signature headers, tcp hellos, control
// frames): byte by byte, so the encoding is the same on every host and needs no alignment.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <vector>

namespace chorus {

// Writes the low `n` bytes of v at p, least significant first.
inline void put_le(std::uint8_t* p, std::uint64_t v, int n) noexcept {
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

// Reads an `n`-byte little-endian unsigned integer at p.
inline std::uint64_t get_le(const std::uint8_t* p, int n) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

}  // namespace chorus
