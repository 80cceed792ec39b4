// SPDX-License-Identifier: BSD-3-Clause
// DeviceGuard: makes a CUDA device current for a scope and restores the caller's afterwards,
// because the current device is per thread and belongs to the application.
#pragma once

#include "core/private.hpp"

#include <cuda_runtime_api.h>

#include "nccl/nccl_check.hpp"

namespace chorus::nccl {

class DeviceGuard {
 public:
  DeviceGuard(int device, const ErrorContext& context) {
    CHORUS_CUDA_CHECK(cudaGetDevice(&previous_), context);
    if (previous_ != device) {
      CHORUS_CUDA_CHECK(cudaSetDevice(device), context);
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) {
      (void)cudaSetDevice(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace chorus::nccl
