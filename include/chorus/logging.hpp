// SPDX-License-Identifier: BSD-3-Clause
// The public logging knobs. chorus logs one line per event to stderr, gated by CHORUS_DEBUG.
#pragma once

#include <functional>
#include <string_view>

#include <chorus/export.hpp>

namespace chorus {

enum class LogLevel : int { none = 0, warn = 1, info = 2, trace = 3 };

// Overrides CHORUS_DEBUG for this process. Thread-safe.
CHORUS_API void set_log_level(LogLevel level) noexcept;
CHORUS_API LogLevel log_level() noexcept;
// Sends every log line (without trailing newline) to sink instead of stderr; nullptr restores
// stderr. The sink is called from chorus's threads and must not block or call into chorus.
CHORUS_API void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);

// The CHORUS_* environment variables chorus reads, with their meaning and defaults.
CHORUS_API const char* environment_help() noexcept;

}  // namespace chorus
