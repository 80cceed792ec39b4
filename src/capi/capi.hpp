// SPDX-License-Identifier: BSD-3-Clause
// The C ABI's private machinery: the handle structs behind the opaque C types, the catch-all
// that turns exceptions into chorus_result_t + thread-local message, and config reading.
#pragma once

#include "core/private.hpp"

#include <chorus/chorus.h>

#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>
#include <chorus/store.hpp>
#include <chorus/tcp_store.hpp>
#include <chorus/work.hpp>

// The opaque handles: global-namespace structs, as declared (incomplete) by chorus.h.
struct chorus_store {
  std::shared_ptr<chorus::Store> store;
  chorus::TcpStore* tcp = nullptr;  // set when store is a TcpStore (for chorus_store_port)
};
struct chorus_store_server {
  std::unique_ptr<chorus::TcpStoreServer> server;
};
struct chorus_group {
  std::shared_ptr<chorus::ProcessGroup> group;
};
struct chorus_work {
  std::shared_ptr<chorus::Work> work;
};

namespace chorus::capi {

// Records the message for chorus_get_last_error() on this thread; returns code.
chorus_result_t set_last_error(chorus_result_t code, const char* message) noexcept;
// Maps the exception being handled to a result code and message. Call only inside catch.
chorus_result_t translate_current_exception(const char* function) noexcept;

// Runs fn (returning void) and converts every exception into a result: the one place the C
// ABI catches. fn's own failures must be thrown, never returned.
template <class Fn>
chorus_result_t guarded(const char* function, Fn&& fn) noexcept {
  try {
    fn();
    return CHORUS_OK;
  } catch (...) {
    return translate_current_exception(function);
  }
}

// Throws InvalidArgument "<function>: <what> is NULL" when p is null.
template <class T>
T* require(T* p, const char* function, const char* what) {
  if (p == nullptr) {
    throw InvalidArgument(fmt::format("{}: {} is NULL; pass a valid pointer", function, what));
  }
  return p;
}

// The integer a C caller stored in an enum-typed field. C lets any int sit there; C++ makes
// loading a value outside the enumerators' range through the enum type undefined (UBSan:
// "load of value 17, which is not a valid value for type 'chorus_reduce_op_t'"), so every
// enum field from a caller is read as its bytes and range-checked as an integer.
template <class Enum>
long long c_enum_value(const Enum& field) noexcept {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &field, sizeof(raw));
  return static_cast<long long>(raw);
}

// Milliseconds from the C ABI: 0 = default (nullopt); negative is an error.
std::optional<Duration> timeout_from_ms(std::int64_t ms, const char* function);

// Reads a versioned config struct: NULL gives `defaults`; otherwise size and version are
// checked and the caller's fields (as far as its size reaches) copied over the defaults, so a
// program built against an older, shorter struct keeps working.
template <class Config>
Config read_config(const Config* user, const Config& defaults, std::size_t v1_size,
                   const char* function, const char* initializer) {
  if (user == nullptr) {
    return defaults;
  }
  if (user->size < v1_size || user->version < 1 || user->version > CHORUS_CONFIG_VERSION) {
    throw InvalidArgument(fmt::format(
        "{}: config has size {} and version {} but this libchorus ({}) expects size >= {} and "
        "version 1..{}; initialize the struct with {} before setting fields",
        function, user->size, user->version, CHORUS_VERSION_STRING, v1_size, CHORUS_CONFIG_VERSION,
        initializer));
  }
  Config out = defaults;
  std::memcpy(static_cast<void*>(&out), static_cast<const void*>(user),
              user->size < sizeof(Config) ? user->size : sizeof(Config));
  return out;
}

}  // namespace chorus::capi
