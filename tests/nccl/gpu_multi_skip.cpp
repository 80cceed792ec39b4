// SPDX-License-Identifier: BSD-3-Clause
// Skips the whole binary (exit 77, meson's SKIP) unless at least two CUDA devices are usable:
// NCCL refuses two ranks of one communicator on one device, so the tests that need a second
// rank need a second GPU. Says why before any test case runs.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

namespace {

struct SkipWithoutTwoGpus : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    int count = 0;
    const cudaError_t result = cudaGetDeviceCount(&count);
    if (result == cudaSuccess && count >= 2) {
      return;
    }
    std::printf(
        "SKIP %s: these tests need two CUDA devices (one per rank; NCCL refuses two "
        "ranks on one device), found %d%s%s. Run them on a machine with two GPUs.\n",
        info.name.c_str(), result == cudaSuccess ? count : 0, result == cudaSuccess ? "" : ": ",
        result == cudaSuccess ? "" : cudaGetErrorString(result));
    std::fflush(stdout);
    std::_Exit(77);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutTwoGpus)
