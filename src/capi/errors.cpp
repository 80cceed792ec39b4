// SPDX-License-Identifier: BSD-3-Clause
// C ABI: the thread-local last error, exception -> result translation, version, chorus_free.
#include "capi/capi.hpp"

#include <cstdlib>
#include <exception>
#include <string>

#include <chorus/version.h>

namespace chorus::capi {
namespace {

// The message of the last failing call on this thread (NCCL's ncclGetLastError model).
thread_local std::string g_last_error;

}  // namespace

chorus_result_t set_last_error(chorus_result_t code, const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // out of memory for the message: keep the code at least
  }
  return code;
}

chorus_result_t translate_current_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    // Same numeric values by construction (chorus.h documents it; a test checks it).
    return set_last_error(static_cast<chorus_result_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    std::string msg;
    try {
      msg = std::string(function) + ": out of memory";
    } catch (...) {
    }
    return set_last_error(CHORUS_ERR_INTERNAL, msg.c_str());
  } catch (const std::exception& e) {
    std::string msg;
    try {
      msg = fmt::format("{}: unexpected exception: {}; please report this", function, e.what());
    } catch (...) {
    }
    return set_last_error(CHORUS_ERR_INTERNAL, msg.c_str());
  } catch (...) {
    std::string msg;
    try {
      msg = fmt::format("{}: unexpected non-standard exception; please report this", function);
    } catch (...) {
    }
    return set_last_error(CHORUS_ERR_INTERNAL, msg.c_str());
  }
}

std::optional<Duration> timeout_from_ms(std::int64_t ms, const char* function) {
  if (ms < 0) {
    throw InvalidArgument(fmt::format(
        "{}: timeout_ms is {}; pass a positive number of milliseconds, or 0 for the default",
        function, ms));
  }
  if (ms == 0) {
    return std::nullopt;
  }
  return Duration(ms);
}

}  // namespace chorus::capi

extern "C" {

const char* chorus_get_last_error(void) { return chorus::capi::g_last_error.c_str(); }

const char* chorus_result_string(chorus_result_t result) {
  switch (chorus::capi::c_enum_value(result)) {  // any int may come from C
    case CHORUS_OK:
      return "ok";
    case CHORUS_ERR_INVALID_ARGUMENT:
    case CHORUS_ERR_TIMEOUT:
    case CHORUS_ERR_NETWORK:
    case CHORUS_ERR_STORE:
    case CHORUS_ERR_BACKEND:
    case CHORUS_ERR_ABORTED:
    case CHORUS_ERR_INTERNAL:
      return chorus::to_string(static_cast<chorus::ErrorCode>(result));
  }
  return "unknown result";
}

// Compiled into the library: the version of the libchorus actually loaded.
const char* chorus_version(void) { return CHORUS_VERSION_STRING; }

int chorus_version_code(void) { return CHORUS_VERSION_CODE; }

void chorus_free(void* ptr) { std::free(ptr); }

}  // extern "C"
