// SPDX-License-Identifier: BSD-3-Clause
// The exception hierarchy, and the internal-error helper behind CHORUS_CHECK.
#include <exception>
#include <string>
#include <typeinfo>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/check.hpp"
#include "core/error_copy.hpp"

namespace chorus {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::network:
      return "network";
    case ErrorCode::store:
      return "store";
    case ErrorCode::backend:
      return "backend";
    case ErrorCode::aborted:
      return "aborted";
    case ErrorCode::internal:
      return "internal";
  }
  return "?";
}

Error::Error(ErrorCode code, const std::string& message, ErrorContext context)
    : std::runtime_error(message), code_(code), context_(std::move(context)) {}
Error::~Error() = default;

InvalidArgument::InvalidArgument(const std::string& message, ErrorContext context)
    : Error(ErrorCode::invalid_argument, message, std::move(context)) {}
InvalidArgument::~InvalidArgument() = default;
TimeoutError::TimeoutError(const std::string& message, ErrorContext context)
    : Error(ErrorCode::timeout, message, std::move(context)) {}
TimeoutError::~TimeoutError() = default;
NetworkError::NetworkError(const std::string& message, ErrorContext context)
    : Error(ErrorCode::network, message, std::move(context)) {}
NetworkError::~NetworkError() = default;
StoreError::StoreError(const std::string& message, ErrorContext context)
    : Error(ErrorCode::store, message, std::move(context)) {}
StoreError::~StoreError() = default;
BackendError::BackendError(const std::string& message, ErrorContext context)
    : Error(ErrorCode::backend, message, std::move(context)) {}
BackendError::~BackendError() = default;

void throw_error(ErrorCode code, const std::string& message, ErrorContext context) {
  switch (code) {
    case ErrorCode::invalid_argument:
      throw InvalidArgument(message, std::move(context));
    case ErrorCode::timeout:
      throw TimeoutError(message, std::move(context));
    case ErrorCode::network:
      throw NetworkError(message, std::move(context));
    case ErrorCode::store:
      throw StoreError(message, std::move(context));
    case ErrorCode::backend:
      throw BackendError(message, std::move(context));
    case ErrorCode::aborted:
    case ErrorCode::internal:
      break;
  }
  throw Error(code, message, std::move(context));
}

namespace {

// A new std::string from what(): the copy shares no reference-counted message buffer.
template <class T>
std::exception_ptr rebuilt(const Error& e) {
  return std::make_exception_ptr(T(std::string(e.what()), e.context()));
}

}  // namespace

std::exception_ptr private_copy(const std::exception_ptr& error) {
  if (!error) {
    return nullptr;
  }
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    // Rebuilt as its own class; a subclass this layer does not know (EarlyTermination) is left
    // shared rather than sliced.
    const std::type_info& type = typeid(e);
    if (type == typeid(InvalidArgument)) return rebuilt<InvalidArgument>(e);
    if (type == typeid(TimeoutError)) return rebuilt<TimeoutError>(e);
    if (type == typeid(NetworkError)) return rebuilt<NetworkError>(e);
    if (type == typeid(StoreError)) return rebuilt<StoreError>(e);
    if (type == typeid(BackendError)) return rebuilt<BackendError>(e);
    if (type == typeid(Error)) {
      return std::make_exception_ptr(Error(e.code(), std::string(e.what()), e.context()));
    }
    return error;
  } catch (...) {
    return error;
  }
}

void rethrow_private_copy(const std::exception_ptr& error) {
  std::rethrow_exception(private_copy(error));
}

void fail_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorCode::internal,
              fmt::format("chorus internal error at {}:{}: {}: {}; please report this with the log",
                          file, line, cond, msg));
}

}  // namespace chorus
