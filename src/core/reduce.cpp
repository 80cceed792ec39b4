// SPDX-License-Identifier: BSD-3-Clause
// Reduction kernels: one template per (element type, operator), dispatched once per call.
//
// Loops run over fixed-size blocks with __restrict pointers so that g++ -O2 (whose default
// "very cheap" vectorizer only takes loops with a known trip count) emits SIMD code; a scalar
// loop finishes the tail. In-place calls (dst == a or dst == b) use two-pointer variants
// rather than telling the compiler that aliasing pointers do not alias.
#include "core/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/check.hpp"
#include "core/half.hpp"

namespace chorus {
namespace {

constexpr std::size_t kBlock = 64;  // elements per vectorized block

// Integer arithmetic wraps (through the unsigned type) instead of overflowing into UB.
template <class T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <class T>
struct WideOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Wide = typename WideOf<T>::type;

struct SumOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  }
};
struct ProdOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T> && sizeof(T) < sizeof(unsigned)) {
      return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
    } else {
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    }
  }
};
struct MinOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    return a < b ? b : a;
  }
};

template <class T>
T divide_value(T v, T divisor) noexcept {
  return static_cast<T>(v / divisor);
}

// ---- native element types ----------------------------------------------------------------

template <class T, class Op, bool kDiv>
void kernel3(T* __restrict d, const T* __restrict a, const T* __restrict b, std::size_t n, T div) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) {
      const T v = Op::apply(a[i + j], b[i + j]);
      d[i + j] = kDiv ? divide_value(v, div) : v;
    }
  }
  for (; i < n; ++i) {
    const T v = Op::apply(a[i], b[i]);
    d[i] = kDiv ? divide_value(v, div) : v;
  }
}

// d = d op b (kDstFirst) or d = b op d: the operand order is kept so that non-commutative
// corner cases (NaN in min/max) give the same bits whichever buffer is the destination.
template <class T, class Op, bool kDiv, bool kDstFirst>
void kernel2(T* __restrict d, const T* __restrict b, std::size_t n, T div) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) {
      const T v = kDstFirst ? Op::apply(d[i + j], b[i + j]) : Op::apply(b[i + j], d[i + j]);
      d[i + j] = kDiv ? divide_value(v, div) : v;
    }
  }
  for (; i < n; ++i) {
    const T v = kDstFirst ? Op::apply(d[i], b[i]) : Op::apply(b[i], d[i]);
    d[i] = kDiv ? divide_value(v, div) : v;
  }
}

template <class T, class Op, bool kDiv>
void run_native(void* dst, const void* a, const void* b, std::size_t n, T div) {
  auto* d = static_cast<T*>(dst);
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  if (d == pa) {
    kernel2<T, Op, kDiv, true>(d, pb, n, div);
  } else if (d == pb) {
    kernel2<T, Op, kDiv, false>(d, pa, n, div);
  } else {
    kernel3<T, Op, kDiv>(d, pa, pb, n, div);
  }
}

template <class T>
void dispatch_native(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op,
                     int divisor) {
  const T div = static_cast<T>(divisor > 0 ? divisor : 1);
  switch (op) {
    case ReduceOp::sum:
      return run_native<T, SumOp, false>(dst, a, b, n, div);
    case ReduceOp::avg:
      return divisor > 0 ? run_native<T, SumOp, true>(dst, a, b, n, div)
                         : run_native<T, SumOp, false>(dst, a, b, n, div);
    case ReduceOp::prod:
      return run_native<T, ProdOp, false>(dst, a, b, n, div);
    case ReduceOp::min:
      return run_native<T, MinOp, false>(dst, a, b, n, div);
    case ReduceOp::max:
      return run_native<T, MaxOp, false>(dst, a, b, n, div);
  }
  CHORUS_CHECK(false, "unknown ReduceOp {}", static_cast<int>(op));
}

// ---- float16 / bfloat16: widen a block to float32, combine, round once ----------------------

struct HalfCodec {
  static float load(std::uint16_t v) noexcept { return half_to_float(v); }
  static std::uint16_t store(float v) noexcept { return float_to_half(v); }
};
struct Bf16Codec {
  static float load(std::uint16_t v) noexcept { return bfloat16_to_float(v); }
  static std::uint16_t store(float v) noexcept { return float_to_bfloat16(v); }
};

template <class Codec, class Op, bool kDiv>
void run_half(void* dst, const void* a, const void* b, std::size_t n, float div) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* pa = static_cast<const std::uint16_t*>(a);
  const auto* pb = static_cast<const std::uint16_t*>(b);
  constexpr std::size_t kChunk = 256;
  float fa[kChunk];
  float fb[kChunk];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    // Loads complete before stores, so dst aliasing a or b is safe block by block.
    for (std::size_t j = 0; j < m; ++j) {
      fa[j] = Codec::load(pa[i + j]);
      fb[j] = Codec::load(pb[i + j]);
    }
    for (std::size_t j = 0; j < m; ++j) {
      const float v = Op::apply(fa[j], fb[j]);
      d[i + j] = Codec::store(kDiv ? v / div : v);
    }
  }
}

template <class Codec>
void dispatch_half(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op,
                   int divisor) {
  const float div = static_cast<float>(divisor > 0 ? divisor : 1);
  switch (op) {
    case ReduceOp::sum:
      return run_half<Codec, SumOp, false>(dst, a, b, n, div);
    case ReduceOp::avg:
      return divisor > 0 ? run_half<Codec, SumOp, true>(dst, a, b, n, div)
                         : run_half<Codec, SumOp, false>(dst, a, b, n, div);
    case ReduceOp::prod:
      return run_half<Codec, ProdOp, false>(dst, a, b, n, div);
    case ReduceOp::min:
      return run_half<Codec, MinOp, false>(dst, a, b, n, div);
    case ReduceOp::max:
      return run_half<Codec, MaxOp, false>(dst, a, b, n, div);
  }
  CHORUS_CHECK(false, "unknown ReduceOp {}", static_cast<int>(op));
}

template <class T>
void divide_native(void* dst, const void* src, std::size_t n, int divisor) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  const T div = static_cast<T>(divisor);
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = divide_value(s[i], div);
  }
}

template <class Codec>
void divide_half(void* dst, const void* src, std::size_t n, int divisor) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* s = static_cast<const std::uint16_t*>(src);
  const float div = static_cast<float>(divisor);
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = Codec::store(Codec::load(s[i]) / div);
  }
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op,
            int avg_divisor) {
  if (count == 0) {
    return;
  }
  if (op != ReduceOp::avg) {
    avg_divisor = 0;
  }
  switch (dtype) {
    case DataType::int8:
      return dispatch_native<std::int8_t>(dst, a, b, count, op, avg_divisor);
    case DataType::uint8:
      return dispatch_native<std::uint8_t>(dst, a, b, count, op, avg_divisor);
    case DataType::int32:
      return dispatch_native<std::int32_t>(dst, a, b, count, op, avg_divisor);
    case DataType::uint32:
      return dispatch_native<std::uint32_t>(dst, a, b, count, op, avg_divisor);
    case DataType::int64:
      return dispatch_native<std::int64_t>(dst, a, b, count, op, avg_divisor);
    case DataType::uint64:
      return dispatch_native<std::uint64_t>(dst, a, b, count, op, avg_divisor);
    case DataType::float16:
      return dispatch_half<HalfCodec>(dst, a, b, count, op, avg_divisor);
    case DataType::bfloat16:
      return dispatch_half<Bf16Codec>(dst, a, b, count, op, avg_divisor);
    case DataType::float32:
      return dispatch_native<float>(dst, a, b, count, op, avg_divisor);
    case DataType::float64:
      return dispatch_native<double>(dst, a, b, count, op, avg_divisor);
  }
  CHORUS_CHECK(false, "unknown DataType {}", static_cast<int>(dtype));
}

void divide(void* dst, const void* src, std::size_t count, DataType dtype, int divisor) {
  CHORUS_CHECK(divisor > 0, "divide by {}", divisor);
  if (count == 0) {
    return;
  }
  switch (dtype) {
    case DataType::int8:
      return divide_native<std::int8_t>(dst, src, count, divisor);
    case DataType::uint8:
      return divide_native<std::uint8_t>(dst, src, count, divisor);
    case DataType::int32:
      return divide_native<std::int32_t>(dst, src, count, divisor);
    case DataType::uint32:
      return divide_native<std::uint32_t>(dst, src, count, divisor);
    case DataType::int64:
      return divide_native<std::int64_t>(dst, src, count, divisor);
    case DataType::uint64:
      return divide_native<std::uint64_t>(dst, src, count, divisor);
    case DataType::float16:
      return divide_half<HalfCodec>(dst, src, count, divisor);
    case DataType::bfloat16:
      return divide_half<Bf16Codec>(dst, src, count, divisor);
    case DataType::float32:
      return divide_native<float>(dst, src, count, divisor);
    case DataType::float64:
      return divide_native<double>(dst, src, count, divisor);
  }
  CHORUS_CHECK(false, "unknown DataType {}", static_cast<int>(dtype));
}

}  // namespace chorus
