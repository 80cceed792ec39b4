// SPDX-License-Identifier: BSD-3-Clause
// DLPack: from_dlpack over the real dlpack.h (Debian libdlpack-dev), the C ABI's copy of the
// DLTensor layout, and the clear rejection of what chorus cannot take.
#include <catch2/catch.hpp>

#include <dlpack/dlpack.h>

#include <cstddef>
#include <vector>

#include <chorus/chorus.h>
#include <chorus/dlpack.hpp>
#include <chorus/errors.hpp>

#include "capi/dlpack_abi.hpp"

using namespace chorus;

// chorus reads DLTensor through its own mirror of the layout: it must match the real header.
static_assert(sizeof(dl::Tensor) == sizeof(DLTensor));
static_assert(offsetof(dl::Tensor, data) == offsetof(DLTensor, data));
static_assert(offsetof(dl::Tensor, device) == offsetof(DLTensor, device));
static_assert(offsetof(dl::Tensor, ndim) == offsetof(DLTensor, ndim));
static_assert(offsetof(dl::Tensor, dtype) == offsetof(DLTensor, dtype));
static_assert(offsetof(dl::Tensor, shape) == offsetof(DLTensor, shape));
static_assert(offsetof(dl::Tensor, strides) == offsetof(DLTensor, strides));
static_assert(offsetof(dl::Tensor, byte_offset) == offsetof(DLTensor, byte_offset));
static_assert(sizeof(DLDevice) == sizeof(dl::Device) && sizeof(DLDataType) == sizeof(dl::DataType));
static_assert(dl::kCPU == kDLCPU && dl::kCUDA == kDLCUDA && dl::kCUDAHost == kDLCUDAHost &&
              dl::kCUDAManaged == kDLCUDAManaged && dl::kOpenCL == kDLOpenCL);
static_assert(dl::kInt == kDLInt && dl::kUInt == kDLUInt && dl::kFloat == kDLFloat &&
              dl::kBfloat == kDLBfloat && dl::kComplex == kDLComplex);

namespace {

struct Dl {
  std::vector<std::int64_t> shape, strides;
  DLTensor t{};
  Dl(void* data, std::vector<std::int64_t> sh, DLDataType dtype, std::vector<std::int64_t> st = {},
     DLDevice device = {kDLCPU, 0})
      : shape(std::move(sh)), strides(std::move(st)) {
    t.data = data;
    t.device = device;
    t.ndim = static_cast<std::int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = 0;
  }
};

constexpr DLDataType kF32{kDLFloat, 32, 1};

}  // namespace

TEST_CASE("from_dlpack: contiguous tensors, every supported dtype, byte_offset", "[capi][dlpack]") {
  std::vector<float> buf(24);
  Dl a(buf.data(), {2, 3, 4}, kF32);
  Tensor t = from_dlpack(a.t);
  REQUIRE(t.data() == buf.data());
  REQUIRE(t.count() == 24);
  REQUIRE(t.dtype() == DataType::float32);
  REQUIRE(t.is_cpu());
  // Explicit compact strides, and size-1 dimensions with arbitrary strides, are contiguous.
  Dl b(buf.data(), {2, 1, 12}, kF32, {12, 999, 1});
  REQUIRE(from_dlpack(&b.t).count() == 24);
  // byte_offset moves the start.
  Dl c(buf.data(), {4}, kF32);
  c.t.byte_offset = 8;
  REQUIRE(from_dlpack(c.t).data() == buf.data() + 2);
  // 0-d tensor (a scalar) and an empty one.
  Dl scalar(buf.data(), {}, kF32);
  REQUIRE(from_dlpack(scalar.t).count() == 1);
  Dl empty(buf.data(), {3, 0}, kF32, {5, 7});
  REQUIRE(from_dlpack(empty.t).count() == 0);

  const std::pair<DLDataType, DataType> types[] = {
      {{kDLInt, 8, 1}, DataType::int8},        {{kDLInt, 32, 1}, DataType::int32},
      {{kDLInt, 64, 1}, DataType::int64},      {{kDLUInt, 8, 1}, DataType::uint8},
      {{kDLUInt, 32, 1}, DataType::uint32},    {{kDLUInt, 64, 1}, DataType::uint64},
      {{kDLFloat, 16, 1}, DataType::float16},  {{kDLFloat, 64, 1}, DataType::float64},
      {{kDLBfloat, 16, 1}, DataType::bfloat16}};
  for (const auto& [dl, dtype] : types) {
    Dl x(buf.data(), {2}, dl);
    REQUIRE(from_dlpack(x.t).dtype() == dtype);
  }
  // CUDA tensors map to cuda:<id>; pinned host memory is a CPU buffer.
  Dl gpu(buf.data(), {4}, kF32, {}, {kDLCUDA, 3});
  REQUIRE(from_dlpack(gpu.t).device() == Device::cuda(3));
  Dl pinned(buf.data(), {4}, kF32, {}, {kDLCUDAHost, 0});
  REQUIRE(from_dlpack(pinned.t).is_cpu());
}

TEST_CASE("from_dlpack: rejects what chorus cannot take, saying why", "[capi][dlpack]") {
  std::vector<float> buf(24);
  Dl transposed(buf.data(), {2, 3}, kF32, {1, 2});
  REQUIRE_THROWS_WITH(from_dlpack(transposed.t),
                      Catch::Contains("not contiguous") &&
                          Catch::Contains("shape [2, 3] with strides [1, 2]") &&
                          Catch::Contains("[3, 1]") && Catch::Contains(".contiguous()"));
  Dl strided(buf.data(), {4}, kF32, {2});
  REQUIRE_THROWS_AS(from_dlpack(strided.t), InvalidArgument);
  Dl complex(buf.data(), {2}, DLDataType{kDLComplex, 64, 1});
  REQUIRE_THROWS_WITH(from_dlpack(complex.t),
                      Catch::Contains("complex64") && Catch::Contains("not supported"));
  Dl boolean(buf.data(), {2}, DLDataType{6 /* kDLBool, DLPack 0.8 */, 8, 1});
  REQUIRE_THROWS_WITH(from_dlpack(boolean.t), Catch::Contains("bool8"));
  Dl float8(buf.data(), {2}, DLDataType{7 /* kDLFloat8_e3m4, DLPack 1.0 */, 8, 1});
  REQUIRE_THROWS_WITH(from_dlpack(float8.t), Catch::Contains("float8"));
  Dl int16(buf.data(), {2}, DLDataType{kDLInt, 16, 1});
  REQUIRE_THROWS_WITH(from_dlpack(int16.t), Catch::Contains("int16"));
  Dl lanes(buf.data(), {2}, DLDataType{kDLFloat, 32, 4});
  REQUIRE_THROWS_WITH(from_dlpack(lanes.t), Catch::Contains("lanes"));
  Dl opencl(buf.data(), {2}, kF32, {}, {kDLOpenCL, 0});
  REQUIRE_THROWS_WITH(from_dlpack(opencl.t),
                      Catch::Contains("device type 4 (OpenCL) is not supported"));
  REQUIRE_THROWS_AS(from_dlpack(static_cast<const DLTensor*>(nullptr)), InvalidArgument);
  // Shapes whose element or byte count overflows size_t are malformed, not a small tensor.
  Dl overflow(buf.data(), {std::int64_t{1} << 40, std::int64_t{1} << 40}, kF32);
  REQUIRE_THROWS_WITH(from_dlpack(overflow.t), Catch::Contains("overflows"));
  Dl bytes_overflow(buf.data(), {std::int64_t{1} << 62}, kF32);
  REQUIRE_THROWS_WITH(from_dlpack(bytes_overflow.t), Catch::Contains("overflows"));
}

TEST_CASE("chorus_tensor_from_dlpack: the C ABI takes DLTensor*", "[capi][dlpack]") {
  std::vector<double> buf(6);
  Dl a(buf.data(), {2, 3}, DLDataType{kDLFloat, 64, 1}, {}, {kDLCUDA, 1});
  a.t.byte_offset = 16;
  chorus_tensor_t t{};
  REQUIRE(chorus_tensor_from_dlpack(&a.t, &t) == CHORUS_OK);
  REQUIRE(t.data == buf.data() + 2);
  REQUIRE(t.count == 6);
  REQUIRE(t.dtype == CHORUS_FLOAT64);
  REQUIRE(t.device_type == CHORUS_DEVICE_CUDA);
  REQUIRE(t.device_index == 1);
  Dl bad(buf.data(), {2, 3}, DLDataType{kDLFloat, 64, 1}, {1, 2});
  REQUIRE(chorus_tensor_from_dlpack(&bad.t, &t) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(chorus_get_last_error(), Catch::Contains("not contiguous"));
  REQUIRE(chorus_tensor_from_dlpack(nullptr, &t) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(chorus_get_last_error(), Catch::Contains("null"));
}
