// SPDX-License-Identifier: BSD-3-Clause
// Timeout messages for store waits: which keys are still missing and what to check.
#include "store/missing_keys.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"

namespace chorus::store {

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(keys.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) {
    out += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  }
  if (keys.size() > shown) {
    out += fmt::format(" and {} more", keys.size() - shown);
  }
  return out;
}

void throw_keys_timeout(const std::string& where, const char* op, Duration timeout,
                        const std::vector<std::string>& missing, const std::string& cause) {
  ErrorContext ctx;
  ctx.op = fmt::format("store.{}", op);
  ctx.timeout = timeout;
  ctx.elapsed = timeout;
  throw TimeoutError(
      fmt::format("{} timed out after {}: still missing {}; {}: check it, or raise the timeout",
                  where, format_duration(timeout), quote_keys(missing), cause),
      ctx);
}

}  // namespace chorus::store
