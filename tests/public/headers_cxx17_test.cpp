// SPDX-License-Identifier: BSD-3-Clause
// Built with -std=c++17 against chorus_dep only (with one generated TU per public header):
// a C++17 framework can include every public header and use the API, dlpack.h not required.
#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#if __cplusplus != 201703L
#error "this test must be compiled as C++17"
#endif

// from_dlpack with a DLTensor-shaped type of the caller's own (no dlpack.h anywhere).
struct MyDevice {
  int device_type;
  int device_id;
};
struct MyDType {
  unsigned char code;
  unsigned char bits;
  unsigned short lanes;
};
struct MyTensor {
  void* data;
  MyDevice device;
  int ndim;
  MyDType dtype;
  long long* shape;
  long long* strides;
  unsigned long long byte_offset;
};

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "FAILED: %s\n", what);
      ++failures;
    }
  };
  check(std::strcmp(chorus::version(), CHORUS_VERSION_STRING) == 0, "version()");
  check(std::strcmp(chorus_version(), CHORUS_VERSION_STRING) == 0, "chorus_version()");
  std::vector<float> buf(6);
  long long shape[2] = {2, 3};
  MyTensor t{buf.data(), {1, 0}, 2, {2, 32, 1}, shape, nullptr, 4};
  const chorus::Tensor view = chorus::from_dlpack(t);
  check(view.count() == 6 && view.data() == buf.data() + 1 &&
            view.dtype() == chorus::DataType::float32,
        "from_dlpack");
  chorus::ddp::DistributedSampler sampler(10, 2, 1, {});
  check(sampler.num_samples() == 5, "DistributedSampler");
  try {
    chorus::Tensor(buf.data(), 6, chorus::DataType::float32).slice(4, 5);
    check(false, "slice out of range throws");
  } catch (const chorus::InvalidArgument&) {
  }
  std::printf("%s\n", failures == 0 ? "C++17 public API OK" : "C++17 public API FAILED");
  return failures == 0 ? 0 : 1;
}
