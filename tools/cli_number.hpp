// SPDX-License-Identifier: BSD-3-Clause
// Strict integer parsing for command-line flags, shared by chorusrun and the *_perf benchmarks:
// the whole word must be a base-10 integer inside [min, max].
#pragma once

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

namespace chorus::cli {

inline std::optional<long long> parse_int_in(const std::string& text, long long min,
                                             long long max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < min || v > max) {
    return std::nullopt;
  }
  return v;
}

// The message both tools print for a bad integer flag.
inline std::string int_expected(const std::string& flag, const std::string& text, long long min,
                                long long max) {
  return flag + " expects an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
         "], got '" + text + "'";
}

}  // namespace chorus::cli
