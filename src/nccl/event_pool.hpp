// SPDX-License-Identifier: BSD-3-Clause
// EventPool: reuses cudaEvent_t (timing disabled) of one device, since creating an event per op
// costs more than the op itself for small messages.
#pragma once

#include "core/private.hpp"

#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include <chorus/errors.hpp>

namespace chorus::nccl {

// Thread-safe. Shared (shared_ptr) by a group and its Works, so it outlives every event in use.
class EventPool {
 public:
  explicit EventPool(int device) noexcept : device_(device) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free event, or a new one. The calling thread must have device() current.
  cudaEvent_t acquire(const ErrorContext& context);
  // Returns an event; it may still be recorded (CUDA lets a recorded event be re-recorded).
  void release(cudaEvent_t event) noexcept;
  int device() const noexcept { return device_; }

 private:
  int device_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;  // guarded by mu_
};

}  // namespace chorus::nccl
