// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_WARN / CHORUS_INFO / CHORUS_TRACE: check the level with one relaxed atomic load before
// formatting; formats are checked at compile time by fmt. Logging never throws.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <string_view>

#include <fmt/format.h>

#include <chorus/logging.hpp>

#include "chorus_config.hpp"

namespace chorus::log {

// Subsystem tag printed on each line.
enum class Subsys : int { init, store, net, coll, nccl, launcher, trace };
const char* to_string(Subsys s) noexcept;

extern std::atomic<int> g_level;  // LogLevel as int; initialized from CHORUS_DEBUG

inline bool enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}
void emit(LogLevel level, Subsys subsys, const char* file, int line, std::string_view msg) noexcept;

template <class... Args>
void write(LogLevel level, Subsys subsys, const char* file, int line,
           fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    emit(level, subsys, file, line, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {
    // Logging must never take the process down; a line that cannot be formatted is dropped.
  }
}

// Context printed in brackets on each line of this thread, e.g. "world r2/4".
void set_thread_context(std::string context);

}  // namespace chorus::log

#define CHORUS_LOG_AT(level, subsys, ...)                                                          \
  do {                                                                                             \
    if (::chorus::log::enabled(level)) {                                                           \
      ::chorus::log::write(level, ::chorus::log::Subsys::subsys, __FILE__, __LINE__, __VA_ARGS__); \
    }                                                                                              \
  } while (0)
#define CHORUS_WARN(subsys, ...) CHORUS_LOG_AT(::chorus::LogLevel::warn, subsys, __VA_ARGS__)
#define CHORUS_INFO(subsys, ...) CHORUS_LOG_AT(::chorus::LogLevel::info, subsys, __VA_ARGS__)
#if CHORUS_TRACE_ENABLED
#define CHORUS_TRACE(subsys, ...) CHORUS_LOG_AT(::chorus::LogLevel::trace, subsys, __VA_ARGS__)
#else
#define CHORUS_TRACE(subsys, ...) \
  do {                            \
  } while (0)
#endif
