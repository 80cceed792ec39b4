// SPDX-License-Identifier: BSD-3-Clause
// Skips the whole binary (exit 77, which meson reports as SKIP) when no CUDA device is usable,
// saying why, before any test case runs.
// Listener types are declared only with this defined outside the runner TU.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

namespace {

struct SkipWithoutGpu : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    int count = 0;
    const cudaError_t result = cudaGetDeviceCount(&count);
    if (result == cudaSuccess && count > 0) {
      return;
    }
    std::printf(
        "SKIP %s: no CUDA device was found (%s: %s); these tests need a GPU. Run "
        "tests/gpu/run.sh on a machine with one.\n",
        info.name.c_str(), result != cudaSuccess ? cudaGetErrorName(result) : "cudaGetDeviceCount",
        result != cudaSuccess ? cudaGetErrorString(result) : "returned 0 devices");
    std::fflush(stdout);
    std::_Exit(77);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutGpu)
