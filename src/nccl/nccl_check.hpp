// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_NCCL_CHECK / CHORUS_CUDA_CHECK: the one place NCCL and CUDA status codes become
// BackendError, with NCCL's own text and the op, sequence number and rank that were running.
#pragma once

#include "core/private.hpp"

#include <exception>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chorus/errors.hpp>

namespace chorus::nccl {

// "ncclAllReduce(...) failed: unhandled cuda error (run with NCCL_DEBUG=INFO for details)
// [NCCL: <ncclGetLastError text>]". comm may be null.
std::string describe_nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm);
// "cudaStreamCreate(...) failed: cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string describe_cuda_failure(const char* call, cudaError_t result);

// "allreduce (seq 4) on rank 0/2 [world]" from what the context knows.
std::string where(const ErrorContext& context);
// "on rank 0/2 [world]".
std::string on_rank(const ErrorContext& context);

[[noreturn]] void throw_nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm,
                                     const char* file, int line, ErrorContext context);
[[noreturn]] void throw_cuda_failure(const char* call, cudaError_t result, const char* file,
                                     int line, ErrorContext context);

// A caught Error as an exception_ptr of its own class (TimeoutError stays a TimeoutError), for
// failures handed to a Work or rethrown on another thread.
std::exception_ptr as_exception_ptr(const Error& e);

}  // namespace chorus::nccl

// ncclInProgress is not a failure: with a non-blocking communicator the caller then polls
// ncclCommGetAsyncError (NcclComm::wait_ready). `ctx` (an ErrorContext) is evaluated only on
// failure, so building it costs nothing on the fast path.
#define CHORUS_NCCL_CHECK(call, comm, ctx)                                                       \
  do {                                                                                           \
    const ncclResult_t chorus_nccl_result_ = (call);                                             \
    if (chorus_nccl_result_ != ncclSuccess && chorus_nccl_result_ != ncclInProgress)             \
        [[unlikely]] {                                                                           \
      ::chorus::nccl::throw_nccl_failure(#call, chorus_nccl_result_, (comm), __FILE__, __LINE__, \
                                         (ctx));                                                 \
    }                                                                                            \
  } while (0)

#define CHORUS_CUDA_CHECK(call, ctx)                                                             \
  do {                                                                                           \
    const cudaError_t chorus_cuda_result_ = (call);                                              \
    if (chorus_cuda_result_ != cudaSuccess) [[unlikely]] {                                       \
      ::chorus::nccl::throw_cuda_failure(#call, chorus_cuda_result_, __FILE__, __LINE__, (ctx)); \
    }                                                                                            \
  } while (0)
