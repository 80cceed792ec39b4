// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_CHECK for internal invariants (always on) and check_arg() for user input.
#pragma once

#include "core/private.hpp"

#include <string>
#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

namespace chorus {

[[noreturn]] void fail_internal(const char* file, int line, const char* cond,
                                const std::string& msg);

// Throws InvalidArgument with the formatted message when cond is false. Formats only on failure.
template <class... Args>
inline void check_arg(bool cond, fmt::format_string<Args...> format, Args&&... args) {
  if (!cond) {
    throw InvalidArgument(fmt::format(format, std::forward<Args>(args)...));
  }
}

}  // namespace chorus

// A broken invariant is a chorus bug: Error{internal} naming file, line and condition.
#define CHORUS_CHECK(cond, ...)                                                     \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::chorus::fail_internal(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
    }                                                                               \
  } while (0)
