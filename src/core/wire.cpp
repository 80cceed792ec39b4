// SPDX-License-Identifier: BSD-3-Clause
// The wire kernels: one template per (data type, wire type), blocks of kWireBlock elements whose
// loads finish before their stores, so that g++ -O2 vectorizes them and in-place calls are safe.
// Each message is a scale word and the slice's elements (core/wire.hpp): narrowing is two passes
// over a slice that is in cache, the largest magnitude and then the scaled conversion.
#include "core/wire.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.hpp"
#include "core/half.hpp"

namespace chorus {
namespace {

constexpr std::size_t kWireBlock = 64;

// The bits of a data type: its significand's width, its exponent's bias, and the largest k for
// which 2^k and 2^-k are normal numbers of it (a smaller slice maximum is not scaled further:
// float32 * 2^126 already puts every float32 denormal in float16's and bfloat16's range, and
// float64 * 2^1022 every float64 denormal in float32's normal range).
template <class T>
struct DataBits;
template <>
struct DataBits<float> {
  using U = std::uint32_t;
  static constexpr int kMantissa = 23;
  static constexpr int kBias = 127;
  static constexpr int kMaxScale = 126;
};
template <>
struct DataBits<double> {
  using U = std::uint64_t;
  static constexpr int kMantissa = 52;
  static constexpr int kBias = 1023;
  static constexpr int kMaxScale = 1022;
};

// 2^k as T, for |k| <= DataBits<T>::kBias - 1: built from its bits (no libm call per slice).
template <class T>
T pow2(int k) noexcept {
  using B = DataBits<T>;
  return std::bit_cast<T>(static_cast<typename B::U>(k + B::kBias) << B::kMantissa);
}

// All ones where c holds: a select the vectorizer takes (a ternary with a float operation in
// one arm stays a branch).
inline std::uint32_t all_if(bool c) noexcept { return 0u - static_cast<std::uint32_t>(c); }

// T: the data's type; W: its wire type; S: the scale word (k, signed, as wide as W).
// kPrecision: the wire's significand bits; kTop: the exponent of the wire's top binade.
struct Bf16Wire {
  using T = float;
  using W = std::uint16_t;
  using S = std::int16_t;
  static constexpr int kPrecision = 8;
  static constexpr int kTop = 127;
  // float_to_bfloat16 without a branch, so that the kernels' loops vectorize.
  [[gnu::always_inline]] static W narrow(T v) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (x >> 16) | 0x40u;  // NaN stays a quiet NaN
    return static_cast<W>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
  // For a slice without inf or NaN.
  [[gnu::always_inline]] static W narrow_finite(T v) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(v);
    return static_cast<W>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  [[gnu::always_inline]] static T widen(W v) noexcept { return bfloat16_to_float(v); }
};
struct F16Wire {
  using T = float;
  using W = std::uint16_t;
  using S = std::int16_t;
  static constexpr int kPrecision = 11;
  static constexpr int kTop = 15;
  // float_to_half with its three cases computed and selected by masks, so that the kernels'
  // loops vectorize (the same bits: tcp_kernels compares them).
  [[gnu::always_inline]] static W narrow(T v) noexcept {
    std::uint32_t x = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    const std::uint32_t tiny =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(x) + 0.5f) - 0x3f000000u;
    const std::uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
    const std::uint32_t huge =
        0x7c00u | (all_if(x > 0x7f800000u) & (0x200u | ((x >> 13) & 0x3ffu)));
    const std::uint32_t is_tiny = all_if(x < 0x38800000u);
    const std::uint32_t is_huge = all_if(x >= 0x47800000u);
    return static_cast<W>(((tiny & is_tiny) | (huge & is_huge) | (normal & ~(is_tiny | is_huge))) |
                          sign);
  }
  // For a scaled slice without inf or NaN: below 65536, so never the overflow case.
  [[gnu::always_inline]] static W narrow_finite(T v) noexcept {
    std::uint32_t x = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    const std::uint32_t tiny =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(x) + 0.5f) - 0x3f000000u;
    const std::uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
    const std::uint32_t is_tiny = all_if(x < 0x38800000u);
    return static_cast<W>(((tiny & is_tiny) | (normal & ~is_tiny)) | sign);
  }
  [[gnu::always_inline]] static T widen(W v) noexcept { return half_to_float(v); }
};
struct F32Wire {
  using T = double;
  using W = float;
  using S = std::int32_t;
  static constexpr int kPrecision = 24;
  static constexpr int kTop = 127;
  [[gnu::always_inline]] static W narrow(T v) noexcept { return static_cast<float>(v); }
  [[gnu::always_inline]] static W narrow_finite(T v) noexcept { return static_cast<float>(v); }
  [[gnu::always_inline]] static T widen(W v) noexcept { return static_cast<double>(v); }
};

// How a slice is sent: multiplied by up = 2^k, clamped to +-limit, rounded; received: widened
// and multiplied by down = 2^-k.
template <class C>
struct Scale {
  using T = typename C::T;
  int k = 0;
  T up = 1;
  T down = 1;
  T limit = std::numeric_limits<T>::infinity();
  bool finite = true;  // no inf or NaN in the slice
};

// k's range: the smallest is a slice whose largest magnitude rounds to 2^(emax + 1).
template <class C>
constexpr int kMinScale = C::kTop - DataBits<typename C::T>::kBias - 1;

template <class C>
Scale<C> scale_for(int k) noexcept {
  Scale<C> s;
  s.k = std::clamp(k, kMinScale<C>, DataBits<typename C::T>::kMaxScale);
  s.up = pow2<typename C::T>(s.k);
  s.down = pow2<typename C::T>(-s.k);
  return s;
}

// The scale of n elements at x. The largest magnitude is the largest of the bit patterns with
// the sign cleared (the order of non-negative floats; NaN above inf above every finite value).
template <class C>
Scale<C> choose_scale(const typename C::T* x, std::size_t n) noexcept {
  using T = typename C::T;
  using B = DataBits<T>;
  using U = typename B::U;
  constexpr U kMagnitude = ~U{0} >> 1;
  constexpr U kExpAllOnes = (U{1} << (8 * sizeof(U) - 1 - B::kMantissa)) - 1;
  // Signed: the magnitudes are non-negative, and SSE2 compares signed integers only.
  using I = std::make_signed_t<U>;
  auto magnitude = [&](std::size_t i) {
    return static_cast<I>(std::bit_cast<U>(x[i]) & kMagnitude);
  };
  I most = 0;
  std::size_t i = 0;
  for (; i + kWireBlock <= n; i += kWireBlock) {
    I block = 0;  // a fixed trip count: g++ -O2 vectorizes it
    for (std::size_t j = 0; j < kWireBlock; ++j) {
      block = std::max(block, magnitude(i + j));
    }
    most = std::max(most, block);
  }
  for (; i < n; ++i) {
    most = std::max(most, magnitude(i));
  }
  const auto largest = static_cast<U>(most);
  if ((largest >> B::kMantissa) == kExpAllOnes) {
    Scale<C> s = scale_for<C>(0);  // inf or NaN: unscaled, so that they arrive as they left
    s.finite = false;
    return s;
  }
  // Round the largest magnitude to the wire's precision (nearest even: the same carry the
  // conversion makes), then read its exponent; a denormal reads as -kBias or 1 - kBias, which
  // the cap of k covers.
  constexpr int kDrop = B::kMantissa - (C::kPrecision - 1);
  const U rounded = largest + ((U{1} << (kDrop - 1)) - 1) + ((largest >> kDrop) & 1);
  const auto field = static_cast<int>(rounded >> B::kMantissa);
  Scale<C> s = scale_for<C>(C::kTop - (field - B::kBias));
  if (static_cast<U>(field) == kExpAllOnes) {
    // The largest rounds past the data's own maximum: saturate at the largest wire value of
    // the binade below the top, which comes back as the data's largest with the wire's
    // precision, (2 - 2^(1 - p)) * 2^emax, within u of any value it stands for.
    s.limit = (T{2} - pow2<T>(1 - C::kPrecision)) * pow2<T>(C::kTop - 1);
  }
  return s;
}

// Element i of a slice on the wire: scaled, clamped (a saturated slice), rounded.
// Inlined into the block loops, or they do not vectorize (float16's conversion is long).
template <class C>
[[gnu::always_inline]] inline typename C::W narrow_one(typename C::T v, typename C::T up,
                                                       typename C::T limit) noexcept {
  return C::narrow(std::min(std::max(v * up, -limit), limit));
}

// Calls fn(i, kWireBlock) for each whole block of n elements, then fn(i, rest) for the rest:
// loops over the fixed count vectorize at -O2, the rest runs element by element.
template <class Fn>
void by_blocks(std::size_t n, const Fn& fn) {
  std::size_t i = 0;
  for (; i + kWireBlock <= n; i += kWireBlock) {
    fn(i, std::integral_constant<std::size_t, kWireBlock>{});
  }
  if (i < n) {
    fn(i, n - i);
  }
}

template <class C>
void put_scale(void* message, const Scale<C>& s) noexcept {
  const auto k = static_cast<typename C::S>(s.k);
  std::memcpy(message, &k, sizeof k);
}

template <class C>
Scale<C> read_scale(const void* message) noexcept {
  typename C::S k;
  std::memcpy(&k, message, sizeof k);
  return scale_for<C>(k);  // clamped: a scale out of range cannot come from narrow()
}

// A message's elements follow its scale word.
template <class C>
const typename C::W* elements(const void* message) noexcept {
  return reinterpret_cast<const typename C::W*>(static_cast<const std::byte*>(message) +
                                                sizeof(typename C::W));
}
template <class C>
typename C::W* elements(void* message) noexcept {
  return reinterpret_cast<typename C::W*>(static_cast<std::byte*>(message) + sizeof(typename C::W));
}

template <class C>
void narrow_kernel(void* dst, const void* src, std::size_t n) {
  using T = typename C::T;
  const T* __restrict s = static_cast<const T*>(src);
  const Scale<C> scale = choose_scale<C>(s, n);
  put_scale<C>(dst, scale);
  typename C::W* __restrict d = elements<C>(dst);
  const T up = scale.up;
  const T limit = scale.limit;
  if (scale.finite && limit == std::numeric_limits<T>::infinity()) {
    // The common slice: no clamp, and no inf, NaN or overflow for the conversion to handle.
    by_blocks(n, [&](std::size_t i, auto m) {
      for (std::size_t j = 0; j < m; ++j) {
        d[i + j] = C::narrow_finite(s[i + j] * up);
      }
    });
    return;
  }
  by_blocks(n, [&](std::size_t i, auto m) {
    for (std::size_t j = 0; j < m; ++j) {
      d[i + j] = narrow_one<C>(s[i + j], up, limit);
    }
  });
}

template <class C>
void round_kernel(void* data, std::size_t n) {
  using T = typename C::T;
  T* __restrict d = static_cast<T*>(data);
  const Scale<C> scale = choose_scale<C>(d, n);
  const T up = scale.up;
  const T down = scale.down;
  const T limit = scale.limit;
  by_blocks(n, [&](std::size_t i, auto m) {
    for (std::size_t j = 0; j < m; ++j) {
      d[i + j] = C::widen(narrow_one<C>(d[i + j], up, limit)) * down;
    }
  });
}

// The message starts (sizeof(T) - sizeof(W)) * n - sizeof(W) bytes into data, its elements
// sizeof(W) later. Its scale is read first (element 0's store may cover it). A block loads all
// its wire elements before it stores: its stores end at sizeof(T) * (i + kWireBlock), at most
// where the next block's wire elements start while i + kWireBlock <= n (widen_from_tail's
// contract), and the tail goes element by element, each load before its store.
template <class C>
void widen_kernel(void* data, std::size_t n) {
  using T = typename C::T;
  using W = typename C::W;
  auto* d = static_cast<T*>(data);
  const void* message = static_cast<std::byte*>(data) + (sizeof(T) - sizeof(W)) * n - sizeof(W);
  const T down = read_scale<C>(message).down;
  const W* w = elements<C>(message);
  W block[kWireBlock];
  std::size_t i = 0;
  for (; i + kWireBlock <= n; i += kWireBlock) {
    std::copy(w + i, w + i + kWireBlock, block);
    for (std::size_t j = 0; j < kWireBlock; ++j) {
      d[i + j] = C::widen(block[j]) * down;
    }
  }
  for (; i < n; ++i) {
    const W v = w[i];
    d[i] = C::widen(v) * down;
  }
}

template <class C, bool kDiv>
void reduce_kernel(void* dst, const void* local, const void* received, std::size_t n,
                   typename C::T div) {
  using T = typename C::T;
  auto* d = static_cast<T*>(dst);
  const auto* l = static_cast<const T*>(local);
  const T down = read_scale<C>(received).down;
  const auto* w = elements<C>(received);
  by_blocks(n, [&](std::size_t i, auto m) {
    T sum[kWireBlock];  // dst may be local: the block's loads finish before its stores
    for (std::size_t j = 0; j < m; ++j) {
      const T v = l[i + j] + C::widen(w[i + j]) * down;
      sum[j] = kDiv ? v / div : v;
    }
    std::copy(sum, sum + static_cast<std::size_t>(m), d + i);
  });
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

std::size_t wire_message_bytes(std::size_t count, DataType wire) noexcept {
  return count == 0 ? 0 : (count + 1) * element_size(wire);
}

void narrow(void* dst, const void* src, std::size_t count, DataType dtype, DataType wire) {
  if (count == 0) {
    return;  // no message (a transfer of no elements is never added)
  }
  with_codec(dtype, wire, [&]<class C>() { narrow_kernel<C>(dst, src, count); });
}

void round_through_wire(void* data, std::size_t count, DataType dtype, DataType wire) {
  with_codec(dtype, wire, [&]<class C>() { round_kernel<C>(data, count); });
}

void widen_from_tail(void* data, std::size_t count, DataType dtype, DataType wire) {
  if (count == 0) {
    return;
  }
  with_codec(dtype, wire, [&]<class C>() { widen_kernel<C>(data, count); });
}

void reduce_from_wire(void* dst, const void* local, const void* received, std::size_t count,
                      DataType dtype, DataType wire, int divisor) {
  if (count == 0) {
    return;
  }
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
