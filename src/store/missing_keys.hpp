// SPDX-License-Identifier: BSD-3-Clause
// The wording shared by every store when a waiting call (get, wait, multi_get) runs out of time.
#pragma once

#include "core/private.hpp"

#include <string>
#include <vector>

#include <chorus/deadline.hpp>

namespace chorus::store {

// "'a', 'b' and 3 more" (at most 8 keys shown).
std::string quote_keys(const std::vector<std::string>& keys);

// Throws TimeoutError "<where> timed out after <timeout>: still missing <keys>; <cause>: check
// it, or raise the timeout", with op and timeout in the ErrorContext.
[[noreturn]] void throw_keys_timeout(const std::string& where, const char* op, Duration timeout,
                                     const std::vector<std::string>& missing,
                                     const std::string& cause);

}  // namespace chorus::store
