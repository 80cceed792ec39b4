// SPDX-License-Identifier: BSD-3-Clause
// Buffers for the benchmarks: host memory (tcp), or CUDA memory (nccl) through the CUDA
// runtime loaded at run time, so that building the benchmarks never needs CUDA headers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <chorus/chorus.hpp>

namespace bench {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(std::size_t bytes) = 0;  // throws std::runtime_error
  virtual void release(void* p) noexcept = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual chorus::Device device() const = 0;
  virtual std::string describe() const = 0;  // for the "# Rank ... device" header line
};

// Host memory for tcp (chorus::SharedBuffers if `shared`: -R 1); the CUDA device `device` for
// nccl (throws std::runtime_error when the CUDA runtime cannot be loaded or the device does not
// exist).
std::unique_ptr<Memory> make_memory(chorus::Backend backend, int device, bool shared = false);

}  // namespace bench
