// SPDX-License-Identifier: BSD-3-Clause
// float16/bfloat16 conversions, the reduction kernels (every dtype x op x aliasing x length)
// and OpSignature encoding and mismatch messages.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/half.hpp"
#include "core/reduce.hpp"
#include "core/signature.hpp"
#include "core/stream_copy.hpp"
#include "core/wire.hpp"

namespace chorus {
namespace {

// Reference decode of a binary16 value, by the definition.
double half_value(std::uint16_t h) {
  const int sign = h >> 15;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nan("") : INFINITY;
  } else {
    v = std::ldexp(static_cast<double>(mant + 1024), exp - 25);
  }
  return sign ? -v : v;
}

// Reference float -> half: nearest representable, ties to even mantissa, by search.
std::uint16_t half_reference(float f) {
  if (std::isnan(f)) {
    return 0x7e00;
  }
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  // Largest h with value(h) <= a among finite positives.
  std::uint32_t lo = 0;
  std::uint32_t hi = 0x7bff;
  if (a >= half_value(0x7bff)) {
    lo = 0x7bff;
  } else {
    while (lo < hi) {
      const std::uint32_t mid = (lo + hi + 1) / 2;
      if (half_value(static_cast<std::uint16_t>(mid)) <= a) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
  }
  const double below = half_value(static_cast<std::uint16_t>(lo));
  const double above = lo == 0x7bff ? 65536.0 : half_value(static_cast<std::uint16_t>(lo + 1));
  std::uint32_t pick;
  if (a - below < above - a) {
    pick = lo;
  } else if (a - below > above - a) {
    pick = lo + 1;
  } else {
    pick = (lo & 1) ? lo + 1 : lo;
  }
  return static_cast<std::uint16_t>(pick | sign);  // lo + 1 == 0x7c00 is infinity
}

}  // namespace

TEST_CASE("half_to_float is exact for every half", "[tcp][kernels]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    const double want = half_value(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
    } else {
      INFO("half 0x" << std::hex << h);
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == std::signbit(want));
    }
    // Round trip.
    if (!std::isnan(want)) {
      REQUIRE(float_to_half(f) == h);
    }
  }
}

TEST_CASE("float_to_half rounds to nearest even, overflows to inf, keeps NaN", "[tcp][kernels]") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t x = bits(rng);
    // Concentrate on the half range (exponents 100..145) most of the time.
    if (i % 4 != 0) {
      x = (x & 0x807fffffu) | ((100u + x % 46u) << 23);
    }
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) {
      CHECK(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    INFO("float bits 0x" << std::hex << x);
    REQUIRE(float_to_half(f) == half_reference(f));
  }
  // Ties and boundaries.
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65519.99f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);
  CHECK(float_to_half(-1e10f) == 0xfc00);
  CHECK(float_to_half(1.0f + 0x1p-11f) == 0x3c00);      // tie -> even (down)
  CHECK(float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02);  // tie -> even (up)
  CHECK(float_to_half(0x1p-25f) == 0x0000);             // tie between 0 and min subnormal
  CHECK(float_to_half(0x1.8p-25f) == 0x0001);
  CHECK(float_to_half(-0.0f) == 0x8000);
}

TEST_CASE("bfloat16 conversions round to nearest even", "[tcp][kernels]") {
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(bfloat16_to_float(0x3f80) == 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1.
  CHECK(float_to_bfloat16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(float_to_bfloat16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(float_to_bfloat16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  CHECK(float_to_bfloat16(INFINITY) == 0x7f80);
  CHECK(float_to_bfloat16(3.4e38f) == 0x7f80);  // rounds up past the largest finite
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bfloat16_to_float(static_cast<std::uint16_t>(b));
    if (!std::isnan(f)) {
      REQUIRE(float_to_bfloat16(f) == b);
    }
  }
}

namespace {

template <class T>
T scalar_op(T a, T b, ReduceOp op) {
  using W = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                        std::type_identity<T>>::type;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
    case ReduceOp::prod:
      if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(static_cast<std::uint64_t>(static_cast<W>(a)) * static_cast<W>(b));
      } else {
        return a * b;
      }
    case ReduceOp::min:
      return b < a ? b : a;
    case ReduceOp::max:
      return a < b ? b : a;
  }
  return a;
}

template <class T>
void check_native(DataType dt) {
  std::mt19937 rng(7);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg}) {
    for (std::size_t n : {0, 1, 3, 63, 64, 65, 129, 1000}) {
      for (int alias = 0; alias < 3; ++alias) {
        for (int div : {0, 3}) {
          std::vector<T> a(n + 1), b(n + 1), d(n + 1), want(n + 1);
          for (std::size_t i = 0; i < n; ++i) {
            if constexpr (std::is_integral_v<T>) {
              a[i] = static_cast<T>(rng());
              b[i] = static_cast<T>(rng());
            } else {
              a[i] = static_cast<T>(static_cast<int>(rng() % 2001) - 1000) / 8;
              b[i] = static_cast<T>(static_cast<int>(rng() % 2001) - 1000) / 8;
            }
            T v = scalar_op(a[i], b[i], op);
            if (op == ReduceOp::avg && div > 0) {
              v = static_cast<T>(v / static_cast<T>(div));
            }
            want[i] = v;
          }
          T* dst = alias == 0 ? d.data() : alias == 1 ? a.data() : b.data();
          reduce(dst, a.data(), b.data(), n, dt, op, div);
          INFO(to_string(dt) << " " << to_string(op) << " n=" << n << " alias=" << alias
                             << " div=" << div);
          REQUIRE(std::memcmp(dst, want.data(), n * sizeof(T)) == 0);
        }
      }
    }
  }
}

template <class Load, class Store>
void check_half(DataType dt, Load load, Store store_fn) {
  std::mt19937 rng(9);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg}) {
    for (std::size_t n : {0, 1, 255, 256, 257, 1000}) {
      for (int alias = 0; alias < 3; ++alias) {
        std::vector<std::uint16_t> a(n + 1), b(n + 1), d(n + 1), want(n + 1);
        for (std::size_t i = 0; i < n; ++i) {
          a[i] = store_fn(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 7.0f);
          b[i] = store_fn(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 7.0f);
          float v = scalar_op(load(a[i]), load(b[i]), op);
          if (op == ReduceOp::avg) {
            v /= 4.0f;
          }
          want[i] = store_fn(v);  // one rounding, from float32
        }
        std::uint16_t* dst = alias == 0 ? d.data() : alias == 1 ? a.data() : b.data();
        reduce(dst, a.data(), b.data(), n, dt, op, 4);
        INFO(to_string(dt) << " " << to_string(op) << " n=" << n << " alias=" << alias);
        REQUIRE(std::memcmp(dst, want.data(), n * 2) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("reduce kernels match a scalar reference for every dtype, op and aliasing",
          "[tcp][kernels]") {
  check_native<std::int8_t>(DataType::int8);
  check_native<std::uint8_t>(DataType::uint8);
  check_native<std::int32_t>(DataType::int32);
  check_native<std::uint32_t>(DataType::uint32);
  check_native<std::int64_t>(DataType::int64);
  check_native<std::uint64_t>(DataType::uint64);
  check_native<float>(DataType::float32);
  check_native<double>(DataType::float64);
  check_half(DataType::float16, half_to_float, float_to_half);
  check_half(DataType::bfloat16, bfloat16_to_float, float_to_bfloat16);
}

TEST_CASE("divide implements avg of a single contribution", "[tcp][kernels]") {
  std::vector<std::int32_t> v{7, -7, 9};
  divide(v.data(), v.data(), v.size(), DataType::int32, 2);
  CHECK(v == std::vector<std::int32_t>{3, -3, 4});
  std::vector<float> f{1.0f, 3.0f};
  divide(f.data(), f.data(), f.size(), DataType::float32, 2);
  CHECK(f == std::vector<float>{0.5f, 1.5f});
}

// The wire layout written out by hand from the format (magic "CHSG", version 2, kind, dtype,
// redop, root u32, 4 reserved zero bytes, count u64, seq u64;
// all little-endian; enum values as numbered in signature.hpp and types.hpp), not recomputed from
// the encoder: a change of the encoding, or of an enum's numbering, breaks compatibility between
// builds and fails here.
TEST_CASE("OpSignature encodes to the documented bytes", "[tcp][kernels]") {
  struct Vector {
    OpSignature sig;
    EncodedSignature bytes;
  };
  const Vector vectors[] = {
      {{OpType::allreduce, DataType::float32, ReduceOp::sum, 0, 1024, 5},
       {0x43, 0x48, 0x53, 0x47, 3, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
        0x00, 0x04, 0,    0,    0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}},
      {{OpType::reduce, DataType::bfloat16, ReduceOp::max, 3, 123456789012ull, 42},
       {0x43, 0x48, 0x53, 0x47, 3,    4, 7, 3, 3,  0, 0, 0, 0, 0, 0, 0,  //
        0x14, 0x1a, 0x99, 0xbe, 0x1c, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0}},
      {{OpType::scatter, DataType::int64, ReduceOp::sum, 258, 7, 1},
       {0x43, 0x48, 0x53, 0x47, 3, 6, 4, 0, 0x02, 0x01, 0, 0, 0, 0, 0, 0,  //
        7,    0,    0,    0,    0, 0, 0, 0, 1,    0,    0, 0, 0, 0, 0, 0}},
      {{OpType::reduce_scatter, DataType::float16, ReduceOp::avg, 0, 33, 0x0102030405060708ull},
       {0x43, 0x48, 0x53, 0x47, 3, 2, 6, 4, 0, 0, 0, 0, 0, 0, 0, 0,  //
        33,   0,    0,    0,    0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1}},
      {{OpType::barrier, DataType::uint8, ReduceOp::sum, 0, 0, 9},
       {0x43, 0x48, 0x53, 0x47, 3, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
        0,    0,    0,    0,    0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}},
      {{OpType::allgather, DataType::float32, ReduceOp::sum, 0, 65536, 2},
       {0x43, 0x48, 0x53, 0x47, 3, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
        0,    0,    1,    0,    0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}},
      // A coalesced allreduce of 0x010203 tensors: their number in bytes 13..15.
      {{OpType::allreduce, DataType::int32, ReduceOp::max, 0, 10, 3, 0x010203},
       {0x43, 0x48, 0x53, 0x47, 3, 0, 2, 3, 0, 0, 0, 0, 0, 3, 2, 1,  //
        10,   0,    0,    0,    0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}},
      // float32 on a bfloat16 wire: byte 12 is 1 + bfloat16's value (7).
      {{OpType::allreduce, DataType::float32, ReduceOp::avg, 0, 64, 4, 0, DataType::bfloat16},
       {0x43, 0x48, 0x53, 0x47, 3, 0, 8, 4, 0, 0, 0, 0, 8, 0, 0, 0,  //
        64,   0,    0,    0,    0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (const Vector& v : vectors) {
    INFO(describe(v.sig));
    CHECK(encode(v.sig) == v.bytes);
    const auto back = decode_signature(v.bytes.data());
    REQUIRE(back);
    CHECK(*back == v.sig);
  }
}

TEST_CASE("OpSignature round-trips and describes mismatches", "[tcp][kernels]") {
  OpSignature s{OpType::reduce, DataType::bfloat16, ReduceOp::max, 3, 123456789012ull, 42};
  const EncodedSignature e = encode(s);
  const auto back = decode_signature(e.data());
  REQUIRE(back);
  CHECK(*back == s);
  EncodedSignature bad = e;
  bad[0] ^= 1;
  CHECK_FALSE(decode_signature(bad.data()));
  bad = e;
  bad[5] = 99;
  CHECK_FALSE(decode_signature(bad.data()));
  bad = e;
  bad[5] = static_cast<std::uint8_t>(OpType::send);  // point-to-point ops carry no signature
  CHECK_FALSE(decode_signature(bad.data()));
  bad = e;
  bad[4] = 1;  // version 1 numbered the kinds differently: never mistaken for this one
  CHECK_FALSE(decode_signature(bad.data()));

  OpSignature a{OpType::allreduce, DataType::float32, ReduceOp::sum, 0, 1024, 5};
  OpSignature b = a;
  b.count = 2048;
  const std::string msg = describe_mismatch(a, 0, b, 2);
  CHECK(msg.find("rank 0 issued allreduce (seq 5, 1024 x float32, sum)") != std::string::npos);
  CHECK(msg.find("rank 2 issued allreduce (seq 5, 2048 x float32, sum)") != std::string::npos);
  CHECK(msg.find("count") != std::string::npos);
  OpSignature c{OpType::broadcast, DataType::float32, ReduceOp::sum, 1, 1024, 5};
  CHECK(describe_mismatch(a, 0, c, 1).find("different collectives") != std::string::npos);
  CHECK(describe(c) == "broadcast (seq 5, 1024 x float32, root 1)");
  CHECK(describe(OpSignature{OpType::barrier, DataType::uint8, ReduceOp::sum, 0, 0, 9}) ==
        "barrier (seq 9)");

  // Byte 12 names a wire or none: anything else means the stream is out of step. So does
  // another version.
  EncodedSignature flags = encode(a);
  flags[12] = kNumDataTypes + 1;
  CHECK_FALSE(decode_signature(flags.data()));
  flags = encode(a);
  flags[4] = 1;
  CHECK_FALSE(decode_signature(flags.data()));

  // Same total in a different number of tensors (a coalesced op split differently).
  OpSignature three = a;
  three.parts = 3;
  OpSignature two = a;
  two.parts = 2;
  CHECK(describe(three) == "allreduce (seq 5, 1024 x float32 in 3 tensors, sum)");
  CHECK(describe_mismatch(three, 0, two, 1).find("different number of tensors") !=
        std::string::npos);

  // A wire on one rank only.
  OpSignature wired = a;
  wired.wire = DataType::bfloat16;
  CHECK(describe(wired) == "allreduce (seq 5, 1024 x float32, sum, bfloat16 wire)");
  CHECK(describe_mismatch(wired, 0, a, 1).find("different wire dtype") != std::string::npos);
}

namespace {

// Sends x through the wire's kernels the way the executor does and checks that every path gives
// the same values: narrow into a message, widened in place from the tail of a buffer of the
// data's type (a receive), reduced onto a local value, and rounded in place (the owner's copy).
// Returns the rounded values.
template <class T>
std::vector<T> through_wire(const std::vector<T>& x, DataType dtype, DataType wire) {
  const std::size_t n = x.size();
  const std::size_t message = wire_message_bytes(n, wire);
  CHECK(message == (n == 0 ? 0 : (n + 1) * element_size(wire)));
  CHECK(message <= n * sizeof(T));
  std::vector<std::byte> narrowed(message);
  narrow(narrowed.data(), x.data(), n, dtype, wire);
  std::vector<T> rounded = x;
  round_through_wire(rounded.data(), n, dtype, wire);
  // A receive's layout: the message in the last bytes of the buffer.
  std::vector<T> widened(n, T{-1});
  if (n > 0) {
    std::memcpy(reinterpret_cast<std::byte*>(widened.data()) + n * sizeof(T) - message,
                narrowed.data(), message);
  }
  widen_from_tail(widened.data(), n, dtype, wire);
  std::vector<T> local(n, T{0.25});
  std::vector<T> sum(n);
  reduce_from_wire(sum.data(), local.data(), narrowed.data(), n, dtype, wire, 0);
  std::vector<T> avg = local;  // in place, with the divisor
  reduce_from_wire(avg.data(), avg.data(), narrowed.data(), n, dtype, wire, 4);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      CHECK(std::isnan(rounded[i]));
      CHECK(std::isnan(widened[i]));
      continue;
    }
    CHECK(std::memcmp(&widened[i], &rounded[i], sizeof(T)) == 0);
    CHECK(sum[i] == T{0.25} + rounded[i]);
    CHECK(avg[i] == (T{0.25} + rounded[i]) / 4);
  }
  return rounded;
}

double wire_u(DataType wire) {
  return wire == DataType::bfloat16 ? 0x1p-8 : wire == DataType::float16 ? 0x1p-11 : 0x1p-24;
}

}  // namespace

TEST_CASE("wire kernels: narrow, round, widen in place from the tail, reduce from the wire",
          "[tcp][kernels][wire]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (std::size_t n : {0u, 1u, 5u, 63u, 64u, 65u, 127u, 1000u}) {
    INFO(n);
    std::vector<float> x(n);
    for (float& v : x) {
      v = dist(rng);
    }
    for (DataType wire : {DataType::bfloat16, DataType::float16}) {
      INFO(to_string(wire));
      auto one = [&](float v) {
        return wire == DataType::bfloat16 ? bfloat16_to_float(float_to_bfloat16(v))
                                          : half_to_float(float_to_half(v));
      };
      // In the wire's normal range a power-of-two scale changes no rounding.
      const auto rounded = through_wire(x, DataType::float32, wire);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(rounded[i] == one(x[i]));
      }
      // A slice holding inf or NaN travels unscaled: they arrive as they left.
      if (n > 3) {
        auto y = x;
        y[0] = INFINITY;
        y[1] = -0.0f;
        y[2] = std::nanf("");
        const auto r = through_wire(y, DataType::float32, wire);
        CHECK(r[0] == INFINITY);
        CHECK(std::signbit(r[1]));
        CHECK(r[1] == 0.0f);
        for (std::size_t i = 3; i < n; ++i) {
          CHECK(r[i] == one(y[i]));
        }
      }
    }
    // float64 data on a float32 wire.
    std::vector<double> d(n);
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = static_cast<double>(dist(rng)) / 3.0;
    }
    const auto back = through_wire(d, DataType::float64, DataType::float32);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(back[i] == static_cast<double>(static_cast<float>(d[i])));
    }
  }
}

TEST_CASE("wire kernels round as float_to_half and float_to_bfloat16 do, every exponent",
          "[tcp][kernels][wire]") {
  // A slice holding inf travels unscaled, so its elements are the plain conversions: every
  // exponent field with mantissas at and around the rounding ties, both signs, NaNs.
  std::vector<float> x = {INFINITY};
  for (std::uint32_t e = 0; e < 256; ++e) {
    for (std::uint32_t m : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu,
                            0x8000u, 0x8001u, 0x18000u, 0x7fffffu, 0x123456u}) {
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        x.push_back(std::bit_cast<float>(sign | (e << 23) | m));
      }
    }
  }
  for (DataType wire : {DataType::bfloat16, DataType::float16}) {
    INFO(to_string(wire));
    const auto r = through_wire(x, DataType::float32, wire);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = wire == DataType::bfloat16 ? bfloat16_to_float(float_to_bfloat16(x[i]))
                                                    : half_to_float(float_to_half(x[i]));
      INFO(std::bit_cast<std::uint32_t>(x[i]));
      CHECK(std::bit_cast<std::uint32_t>(r[i]) == std::bit_cast<std::uint32_t>(want));
    }
  }
}

TEST_CASE("wire kernels keep the range: every magnitude of float32 and float64, no inf, no flush",
          "[tcp][kernels][wire]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> unit(1.0, 2.0);
  // Slices of one binade each, from float32's smallest denormal to its largest value: every
  // element within u of itself (relative), finite, never flushed; rounding what the wire
  // rounded changes nothing, neither for the slice nor for a part of it (a send of a part of a
  // block its owner rounded).
  for (DataType wire : {DataType::bfloat16, DataType::float16}) {
    INFO(to_string(wire));
    const double u = wire_u(wire);
    for (int e = -149; e <= 127; ++e) {
      INFO(e);
      std::vector<float> x(37);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = std::ldexp(unit(rng), e);
        x[i] = static_cast<float>(std::min<double>(v, FLT_MAX)) * (i % 2 == 0 ? 1.0f : -1.0f);
      }
      x[5] = e == 127 ? FLT_MAX : x[5];  // rounds past float32's largest at any precision
      const auto r = through_wire(x, DataType::float32, wire);
      for (std::size_t i = 0; i < x.size(); ++i) {
        CHECK(std::isfinite(r[i]));
        CHECK(std::abs(static_cast<double>(r[i]) - x[i]) <= u * std::abs(x[i]));
      }
      auto again = r;
      round_through_wire(again.data(), again.size(), DataType::float32, wire);
      CHECK(again == r);
      std::vector<float> part(r.begin() + 7, r.begin() + 20);
      round_through_wire(part.data(), part.size(), DataType::float32, wire);
      CHECK(part == std::vector<float>(r.begin() + 7, r.begin() + 20));
    }
    // One slice from 2^100 down to float32's denormals: every element keeps u relative or is
    // off by at most eta times the slice's largest (float16: 2^-40 (1 + u)).
    const double eta = wire == DataType::float16 ? 0x1p-40 * (1 + u) : 0x1p-260;
    std::vector<float> wide;
    for (int e = 100; e >= -149; --e) {
      wide.push_back(static_cast<float>(std::ldexp(unit(rng), e)));
    }
    const auto r = through_wire(wide, DataType::float32, wire);
    const double largest = wide.front();
    for (std::size_t i = 0; i < wide.size(); ++i) {
      CHECK(std::abs(static_cast<double>(r[i]) - wide[i]) <= u * wide[i] + eta * largest);
    }
  }
  // float64 over float32: every binade from the smallest denormal to DBL_MAX.
  std::vector<int> binades;
  for (int e = -1074; e < 1023; e += 7) {
    binades.push_back(e);
  }
  binades.push_back(1023);
  for (int e : binades) {
    INFO(e);
    std::vector<double> x(9);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = std::min(std::ldexp(unit(rng), e), DBL_MAX) * (i % 2 == 0 ? 1.0 : -1.0);
    }
    x[4] = e == 1023 ? DBL_MAX : x[4];
    const auto r = through_wire(x, DataType::float64, DataType::float32);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(std::isfinite(r[i]));
      CHECK(std::abs(r[i] - x[i]) <= 0x1p-24 * std::abs(x[i]));
    }
  }
}

TEST_CASE("wire kernels: the wire's arguments", "[tcp][kernels][wire]") {
  CHECK(wire_narrows(DataType::float32, DataType::bfloat16));
  CHECK(wire_narrows(DataType::float64, DataType::float32));
  CHECK_FALSE(wire_narrows(DataType::float32, DataType::float32));
  CHECK_FALSE(wire_narrows(DataType::int32, DataType::bfloat16));
  CHECK(default_wire(DataType::float32, ReduceOp::sum, DataType::bfloat16) == DataType::bfloat16);
  CHECK(default_wire(DataType::float64, ReduceOp::avg, DataType::bfloat16) == DataType::float32);
  CHECK(default_wire(DataType::float32, ReduceOp::max, DataType::bfloat16) == DataType::float32);
  CHECK(default_wire(DataType::int32, ReduceOp::sum, DataType::bfloat16) == DataType::int32);
  CHECK(default_wire(DataType::float32, ReduceOp::sum, DataType::float32) == DataType::float32);
}

TEST_CASE("stream_copy copies exactly the bytes asked for, at every alignment", "[tcp][kernels]") {
  std::vector<std::uint8_t> src(600);
  for (std::size_t i = 0; i < src.size(); ++i) {
    src[i] = static_cast<std::uint8_t>(i * 7 + 1);
  }
  for (std::size_t dst_offset = 0; dst_offset < 18; ++dst_offset) {
    for (std::size_t src_offset : {std::size_t{0}, std::size_t{3}}) {
      for (std::size_t bytes : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 513}) {
        std::vector<std::uint8_t> dst(600, 0xee);
        stream_copy(dst.data() + dst_offset, src.data() + src_offset, bytes);
        stream_fence();
        bool ok = true;
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= dst_offset && i < dst_offset + bytes;
          ok = ok && dst[i] == (inside ? src[i - dst_offset + src_offset] : 0xee);
        }
        INFO("dst offset " << dst_offset << ", src offset " << src_offset << ", " << bytes
                           << " bytes");
        CHECK(ok);
      }
    }
  }
}

}  // namespace chorus
