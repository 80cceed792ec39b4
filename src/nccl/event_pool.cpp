// SPDX-License-Identifier: BSD-3-Clause
// EventPool: a free list of CUDA events.
#include "nccl/event_pool.hpp"

#include "nccl/nccl_check.hpp"

namespace chorus::nccl {

EventPool::~EventPool() {
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  for (cudaEvent_t event : free_) {
    (void)cudaEventDestroy(event);
  }
  if (switched) {
    (void)cudaSetDevice(previous);
  }
}

cudaEvent_t EventPool::acquire(const ErrorContext& context) {
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  CHORUS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), context);
  return event;
}

void EventPool::release(cudaEvent_t event) noexcept {
  if (event == nullptr) {
    return;
  }
  try {
    std::lock_guard lock(mu_);
    free_.push_back(event);
  } catch (...) {
    (void)cudaEventDestroy(event);
  }
}

}  // namespace chorus::nccl
