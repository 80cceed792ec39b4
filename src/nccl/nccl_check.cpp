// SPDX-License-Identifier: BSD-3-Clause
// Turning NCCL and CUDA status codes into BackendError messages that say what to do next.
#include "nccl/nccl_check.hpp"

#include <cstring>

#include <fmt/format.h>

#include "nccl/nccl_features.hpp"

namespace chorus::nccl {
namespace {

// "ncclAllReduce(in.data(), ...)" is long and says little; keep the function name.
std::string call_name(const char* call) {
  const char* paren = std::strchr(call, '(');
  return paren ? std::string(call, paren) : std::string(call);
}

std::string file_base(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

}  // namespace

std::string describe_nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm) {
  std::string text = fmt::format("{} failed: {}", call_name(call), ncclGetErrorString(result));
#if CHORUS_NCCL_HAS_LAST_ERROR
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') {
    text += fmt::format(" [NCCL: {}]", last);
  }
#else
  (void)comm;
#endif
  return text;
}

std::string describe_cuda_failure(const char* call, cudaError_t result) {
  return fmt::format("{} failed: {} ({})", call_name(call), cudaGetErrorName(result),
                     cudaGetErrorString(result));
}

std::string where(const ErrorContext& context) {
  std::string text = context.op.empty() ? std::string("nccl") : context.op;
  if (context.seq != 0) {
    text += fmt::format(" (seq {})", context.seq);
  }
  if (context.rank >= 0) {
    text += fmt::format(" on rank {}/{}", context.rank, context.size);
  }
  if (!context.group.empty()) {
    text += fmt::format(" [{}]", context.group);
  }
  return text;
}

std::string on_rank(const ErrorContext& context) {
  std::string text = fmt::format("on rank {}/{}", context.rank, context.size);
  if (!context.group.empty()) {
    text += fmt::format(" [{}]", context.group);
  }
  return text;
}

void throw_nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm, const char* file,
                        int line, ErrorContext context) {
  // The message is built before the context is moved into the exception.
  std::string message = fmt::format(
      "{}: {} at {}:{}; run every rank with NCCL_DEBUG=WARN (or INFO) to see NCCL's "
      "own report",
      where(context), describe_nccl_failure(call, result, comm), file_base(file), line);
  throw BackendError(message, std::move(context));
}

void throw_cuda_failure(const char* call, cudaError_t result, const char* file, int line,
                        ErrorContext context) {
  // A sticky error (illegal address ...) stays set; a non-sticky one must not leak into the
  // next unrelated cudaGetLastError() of the application.
  (void)cudaGetLastError();
  std::string message = fmt::format(
      "{}: {} at {}:{}; check the device with nvidia-smi and that the buffers are valid device "
      "memory",
      where(context), describe_cuda_failure(call, result), file_base(file), line);
  throw BackendError(message, std::move(context));
}

std::exception_ptr as_exception_ptr(const Error& e) {
  try {
    throw_error(e.code(), e.what(), e.context());
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace chorus::nccl
