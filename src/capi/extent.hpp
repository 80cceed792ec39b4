// SPDX-License-Identifier: BSD-3-Clause
// Checks that a (data, count, dtype) triple from outside (the C ABI, a DLPack capsule) names
// a byte range that exists: count x element size does not overflow size_t, and data + bytes
// does not wrap past the end of the address space. Without these, an absurd count becomes a
// small nbytes() and every later bounds check passes.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/types.hpp>

namespace chorus::capi {

inline void check_extent(const void* data, std::size_t count, DataType dtype,
                         const std::string& who) {
  const std::size_t element = element_size(dtype);
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  if (element != 0 && count > max / element) {
    throw InvalidArgument(
        fmt::format("{}: count {} x {} bytes per {} element overflows the address space; "
                    "the count is wrong (it is in elements, not bytes)",
                    who, count, element, to_string(dtype)));
  }
  const std::size_t bytes = count * element;
  if (data != nullptr && reinterpret_cast<std::uintptr_t>(data) > max - bytes) {
    throw InvalidArgument(
        fmt::format("{}: {} bytes from address {} run past the end of the address space; "
                    "the data pointer or the count is wrong",
                    who, bytes, data));
  }
}

}  // namespace chorus::capi
