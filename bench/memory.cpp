// SPDX-License-Identifier: BSD-3-Clause
// Host buffers, and CUDA buffers through dlopen("libcudart") for the nccl backend.
#include "memory.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

namespace bench {
namespace {

class HostMemory final : public Memory {
 public:
  void* alloc(std::size_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
    if (p == nullptr) {
      throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void to_device(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  void to_host(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  chorus::Device device() const override { return chorus::Device::cpu(); }
  std::string describe() const override {
    return "cpu [" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores]";
  }
};

// chorus::SharedBuffers: host memory that the group's same-host peers map (-R 1).
class SharedHostMemory final : public Memory {
 public:
  void* alloc(std::size_t bytes) override {
    chorus::SharedBuffer b(std::max<std::size_t>(bytes, 1));
    void* p = b.data();
    buffers_.emplace(p, std::move(b));
    return p;
  }
  void release(void* p) noexcept override { buffers_.erase(p); }
  void to_device(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  void to_host(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  chorus::Device device() const override { return chorus::Device::cpu(); }
  std::string describe() const override {
    return "cpu [" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores, SharedBuffer]";
  }

 private:
  std::map<void*, chorus::SharedBuffer> buffers_;
};

// The few CUDA runtime entry points we need; cudaError_t is an int-sized enum (0 = success).
class CudaMemory final : public Memory {
 public:
  explicit CudaMemory(int device) : device_(device) {
    for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}) {
      lib_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib_ != nullptr) {
        break;
      }
    }
    if (lib_ == nullptr) {
      throw std::runtime_error("--backend nccl: cannot load the CUDA runtime (libcudart.so): " +
                               std::string(::dlerror()));
    }
    sym(set_device_, "cudaSetDevice");
    sym(malloc_, "cudaMalloc");
    sym(free_, "cudaFree");
    sym(memcpy_, "cudaMemcpy");
    sym(error_string_, "cudaGetErrorString");
    sym(bus_id_, "cudaDeviceGetPCIBusId");
    check(set_device_(device_), "cudaSetDevice");
  }
  ~CudaMemory() override = default;  // the runtime stays loaded until exit

  void* alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(malloc_(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void release(void* p) noexcept override { (void)free_(p); }
  void to_device(void* dst, const void* src, std::size_t n) override {
    check(memcpy_(dst, src, n, 1), "cudaMemcpy host to device");
  }
  void to_host(void* dst, const void* src, std::size_t n) override {
    check(memcpy_(dst, src, n, 2), "cudaMemcpy device to host");
  }
  chorus::Device device() const override { return chorus::Device::cuda(device_); }
  std::string describe() const override {
    char bus[64] = "?";
    (void)bus_id_(bus, sizeof(bus), device_);
    return "cuda:" + std::to_string(device_) + " [" + bus + "]";
  }

 private:
  template <class F>
  void sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib_, name));
    if (f == nullptr) {
      throw std::runtime_error(std::string("CUDA runtime lacks ") + name);
    }
  }
  void check(int err, const char* what) const {
    if (err != 0) {
      throw std::runtime_error(std::string(what) + " failed on device " + std::to_string(device_) +
                               ": " + error_string_(err));
    }
  }

  int device_;
  void* lib_ = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*malloc_)(void**, std::size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, std::size_t, int) = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*bus_id_)(char*, int, int) = nullptr;
};

}  // namespace

std::unique_ptr<Memory> make_memory(chorus::Backend backend, int device, bool shared) {
  if (backend == chorus::Backend::nccl) {
    return std::make_unique<CudaMemory>(device);
  }
  if (shared) {
    return std::make_unique<SharedHostMemory>();
  }
  return std::make_unique<HostMemory>();
}

}  // namespace bench
