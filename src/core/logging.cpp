// SPDX-License-Identifier: BSD-3-Clause
// Log line formatting and the sink: "host:pid:tid chorus [ctx] LEVEL SUBSYS message".
#include "core/logging.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "core/env.hpp"

namespace chorus::log {
namespace {

int initial_level() noexcept {
  try {
    return static_cast<int>(env::debug_level());
  } catch (...) {
    // A bad CHORUS_DEBUG must not crash static initialization; it is reported at first use of
    // the environment by init_from_env. Fall back to WARN.
    std::fputs(
        "chorus: CHORUS_DEBUG has an invalid value (use NONE, WARN, INFO or TRACE); using WARN\n",
        stderr);
    return static_cast<int>(LogLevel::warn);
  }
}

std::mutex& sink_mutex() {
  static std::mutex mu;
  return mu;
}
std::function<void(LogLevel, std::string_view)>& sink() {
  static std::function<void(LogLevel, std::string_view)> s;  // guarded by sink_mutex()
  return s;
}
thread_local std::string t_context;

const char* level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::warn:
      return "WARN";
    case LogLevel::info:
      return "INFO";
    case LogLevel::trace:
      return "RECORDER";
    case LogLevel::none:
      break;
  }
  return "NONE";
}

}  // namespace

std::atomic<int> g_level{initial_level()};

const char* to_string(Subsys s) noexcept {
  switch (s) {
    case Subsys::init:
      return "INIT";
    case Subsys::store:
      return "STORE";
    case Subsys::net:
      return "NET";
    case Subsys::coll:
      return "COLL";
    case Subsys::nccl:
      return "NCCL";
    case Subsys::launcher:
      return "LAUNCH";
    case Subsys::trace:
      return "RECORDER";
  }
  return "?";
}

void set_thread_context(std::string context) { t_context = std::move(context); }

void emit(LogLevel level, Subsys subsys, const char* file, int line,
          std::string_view msg) noexcept {
  try {
    static const std::string host = [] {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      return std::string(name);
    }();
    const std::string context = t_context.empty() ? std::string() : "[" + t_context + "] ";
    std::string text = fmt::format("{}:{}:{} chorus {}{} {} {}", host, getpid(),
                                   static_cast<long>(syscall(SYS_gettid)), context,
                                   level_name(level), to_string(subsys), msg);
    if (level == LogLevel::trace) {
      text += fmt::format(" ({}:{})", file, line);
    }
    std::lock_guard lock(sink_mutex());
    if (sink()) {
      sink()(level, text);
    } else {
      text += '\n';
      std::fwrite(text.data(), 1, text.size(), stderr);
    }
  } catch (...) {
    // Never let logging throw.
  }
}

}  // namespace chorus::log

namespace chorus {

void set_log_level(LogLevel level) noexcept {
  log::g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
LogLevel log_level() noexcept {
  return static_cast<LogLevel>(log::g_level.load(std::memory_order_relaxed));
}
void set_log_sink(std::function<void(LogLevel, std::string_view)> sink) {
  std::lock_guard lock(log::sink_mutex());
  log::sink() = std::move(sink);
}

}  // namespace chorus
