// SPDX-License-Identifier: BSD-3-Clause
// The wire kernels: one template per (data type, wire type), blocks of kWireBlock elements whose
// loads finish before their stores, so that g++ -O2 vectorizes them and in-place calls are safe.
#include "core/wire.hpp"

#include <algorithm>
#include <cstdint>

#include "core/check.hpp"
#include "core/half.hpp"

namespace chorus {
namespace {

constexpr std::size_t kWireBlock = 64;

// T: the data's type; W: its wire type.
struct Bf16Wire {
  using T = float;
  using W = std::uint16_t;
  static W narrow(T v) noexcept { return float_to_bfloat16(v); }
  static T widen(W v) noexcept { return bfloat16_to_float(v); }
};
struct F16Wire {
  using T = float;
  using W = std::uint16_t;
  static W narrow(T v) noexcept { return float_to_half(v); }
  static T widen(W v) noexcept { return half_to_float(v); }
};
struct F32Wire {
  using T = double;
  using W = float;
  static W narrow(T v) noexcept { return static_cast<float>(v); }
  static T widen(W v) noexcept { return static_cast<double>(v); }
};

template <class C>
void narrow_kernel(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<typename C::W*>(dst);
  const auto* s = static_cast<const typename C::T*>(src);
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = C::narrow(s[i]);
  }
}

template <class C>
void round_kernel(void* data, std::size_t n) {
  auto* d = static_cast<typename C::T*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = C::widen(C::narrow(d[i]));
  }
}

// The wire elements start (sizeof(T) - sizeof(W)) * n bytes into data. A block loads all its
// wire elements before it stores: its stores end at sizeof(T) * (i + kWireBlock), at most where the
// next block's wire elements start while i + kWireBlock <= n (widen_from_tail's contract), and the
// tail goes element by element, each load before its store.
template <class C>
void widen_kernel(void* data, std::size_t n) {
  using T = typename C::T;
  using W = typename C::W;
  auto* d = static_cast<T*>(data);
  const auto* w =
      reinterpret_cast<const W*>(static_cast<std::byte*>(data) + (sizeof(T) - sizeof(W)) * n);
  W block[kWireBlock];
  std::size_t i = 0;
  for (; i + kWireBlock <= n; i += kWireBlock) {
    std::copy(w + i, w + i + kWireBlock, block);
    for (std::size_t j = 0; j < kWireBlock; ++j) {
      d[i + j] = C::widen(block[j]);
    }
  }
  for (; i < n; ++i) {
    const W v = w[i];
    d[i] = C::widen(v);
  }
}

template <class C, bool kDiv>
void reduce_kernel(void* dst, const void* local, const void* received, std::size_t n,
                   typename C::T div) {
  using T = typename C::T;
  auto* d = static_cast<T*>(dst);
  const auto* l = static_cast<const T*>(local);
  const auto* w = static_cast<const typename C::W*>(received);
  T sum[kWireBlock];
  for (std::size_t i = 0; i < n; i += kWireBlock) {
    const std::size_t m = std::min(kWireBlock, n - i);
    for (std::size_t j = 0; j < m; ++j) {
      const T v = l[i + j] + C::widen(w[i + j]);
      sum[j] = kDiv ? v / div : v;
    }
    std::copy(sum, sum + m, d + i);
  }
}

// Calls fn.template operator()<Codec>() for the (dtype, wire) pair.
template <class Fn>
void with_codec(DataType dtype, DataType wire, Fn&& fn) {
  CHORUS_CHECK(wire_narrows(dtype, wire), "no wire of {} for {} data", to_string(wire),
               to_string(dtype));
  if (wire == DataType::bfloat16) {
    fn.template operator()<Bf16Wire>();
  } else if (wire == DataType::float16) {
    fn.template operator()<F16Wire>();
  } else {
    fn.template operator()<F32Wire>();
  }
}

}  // namespace

bool has_wire(OpType type) noexcept {
  return type == OpType::allreduce || type == OpType::reduce_scatter || type == OpType::reduce;
}

bool wire_narrows(DataType dtype, DataType wire) noexcept {
  if (dtype == DataType::float32) {
    return wire == DataType::bfloat16 || wire == DataType::float16;
  }
  return dtype == DataType::float64 && wire == DataType::float32;
}

DataType default_wire(DataType dtype, ReduceOp op, std::optional<DataType> group_default) noexcept {
  const bool sums = op == ReduceOp::sum || op == ReduceOp::avg;
  if (!sums || !group_default) {
    return dtype;
  }
  // One setting for a job whose ops mix float32 and float64: a 16-bit default gives float64
  // data a float32 wire, and a float32 default leaves float32 data alone.
  if (dtype == DataType::float64) {
    return DataType::float32;
  }
  return wire_narrows(dtype, *group_default) ? *group_default : dtype;
}

void narrow(void* dst, const void* src, std::size_t count, DataType dtype, DataType wire) {
  with_codec(dtype, wire, [&]<class C>() { narrow_kernel<C>(dst, src, count); });
}

void round_through_wire(void* data, std::size_t count, DataType dtype, DataType wire) {
  with_codec(dtype, wire, [&]<class C>() { round_kernel<C>(data, count); });
}

void widen_from_tail(void* data, std::size_t count, DataType dtype, DataType wire) {
  with_codec(dtype, wire, [&]<class C>() { widen_kernel<C>(data, count); });
}

void reduce_from_wire(void* dst, const void* local, const void* received, std::size_t count,
                      DataType dtype, DataType wire, int divisor) {
  with_codec(dtype, wire, [&]<class C>() {
    using T = typename C::T;
    if (divisor > 0) {
      reduce_kernel<C, true>(dst, local, received, count, static_cast<T>(divisor));
    } else {
      reduce_kernel<C, false>(dst, local, received, count, T{1});
    }
  });
}

}  // namespace chorus
