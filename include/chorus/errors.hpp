// SPDX-License-Identifier: BSD-3-Clause
// The one exception hierarchy. Messages say what happened and what to do next; the same facts
// are fields in ErrorContext so a framework can act on them without parsing text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>

namespace chorus {

enum class ErrorCode : int {
  invalid_argument = 1,  // the caller's fault: wrong arguments (nothing was sent), or ranks that
                         // issued different collectives at one sequence number (the group aborts)
  timeout,               // a deadline passed
  network,               // reset, refused, unreachable, bad handshake
  store,                 // the store answered with an error, or its protocol broke
  backend,               // NCCL/CUDA or another backend library failed
  aborted,               // abort() was called on the group
  internal,              // a broken invariant inside chorus: please report
};
CHORUS_API const char* to_string(ErrorCode code) noexcept;

// What was known where the error was raised. -1 / 0 / empty mean "not applicable".
struct ErrorContext {
  int rank = -1;             // the rank that raised it
  int size = -1;             // group size
  std::string group;         // group name
  std::string op;            // "allreduce", "store.get", "connect" ...
  std::uint64_t seq = 0;     // the op's sequence number in its group (1-based)
  std::uint64_t bytes = 0;   // payload size of the op
  std::vector<int> peers;    // ranks implicated: silent, dead, or disagreeing
  std::string peer_address;  // host:port of the peer or server, when one is involved
  Duration elapsed{0};       // time spent before failing
  Duration timeout{0};       // the deadline that applied, as a duration
  int os_error = 0;          // errno of the last failing system call
};

class CHORUS_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, ErrorContext context = {});
  ~Error() override;
  ErrorCode code() const noexcept { return code_; }
  const ErrorContext& context() const noexcept { return context_; }

 private:
  ErrorCode code_;
  ErrorContext context_;
};

// Wrong arguments: thrown at call time on the calling rank, before anything is sent. Also the
// error of a collective whose signature (op, dtype, count, root) differs across ranks: then it
// names both signatures and ranks, and the group is aborted.
class CHORUS_API InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message, ErrorContext context = {});
  ~InvalidArgument() override;
};

// A deadline passed. For a collective the group is aborted and later calls rethrow this error.
class CHORUS_API TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& message, ErrorContext context = {});
  ~TimeoutError() override;
};

// A connection failed: refused, reset, closed by the peer, bad handshake.
class CHORUS_API NetworkError : public Error {
 public:
  explicit NetworkError(const std::string& message, ErrorContext context = {});
  ~NetworkError() override;
};

// The store refused a request or its protocol broke.
class CHORUS_API StoreError : public Error {
 public:
  explicit StoreError(const std::string& message, ErrorContext context = {});
  ~StoreError() override;
};

// NCCL, CUDA or another backend library reported an error (its text is in what()); also
// "this backend was not built".
class CHORUS_API BackendError : public Error {
 public:
  explicit BackendError(const std::string& message, ErrorContext context = {});
  ~BackendError() override;
};

// Rethrows `error` as the matching subclass (so catch (TimeoutError&) works everywhere).
[[noreturn]] CHORUS_API void throw_error(ErrorCode code, const std::string& message,
                                         ErrorContext context = {});

}  // namespace chorus
