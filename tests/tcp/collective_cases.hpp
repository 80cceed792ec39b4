// SPDX-License-Identifier: BSD-3-Clause
// One collective case (op, world size, count, dtype, reduce op, root, in place or not):
// builds a rank's input and output buffers with known values and checks that rank's result
// against a reference computed locally. Shared by the loopback algorithm tests and the
// multi-process tests, so both check exactly the same thing.
//
// Inputs are small integers (products of +-1 and +-2 for prod), so float sums and products
// are exact in every dtype and the reference does not depend on the reduction order; avg
// divides the exact sum once, as the kernels do.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <chorus/shared_buffer.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

#include "core/half.hpp"
#include "core/signature.hpp"

namespace chorus::test {

inline constexpr DataType kAllTypes[] = {
    DataType::int8,   DataType::uint8,   DataType::int32,    DataType::uint32,  DataType::int64,
    DataType::uint64, DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                       ReduceOp::avg};

struct Case {
  OpType kind = OpType::allreduce;
  int n = 1;
  std::size_t count = 0;  // as OpSignature::count: per-rank elements (all_to_all: total)
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool in_place = false;

  std::string describe() const {
    return fmt::format("{} n={} count={} {} {} root={} {}", to_string(kind), n, count,
                       to_string(dtype), to_string(op), root,
                       in_place ? "in-place" : "out-of-place");
  }
};

inline long long base_value(int rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::prod) {
    static constexpr int kVals[] = {1, -1, 2, 1, -2, 1};
    return kVals[(static_cast<std::size_t>(rank) * 5 + i) % 6];
  }
  return static_cast<long long>((static_cast<std::size_t>(rank + 1) * 3 + i * 5) % 7) - 2;
}

// Calls f(T{}) with the type dt computes in: its element type, float for float16/bfloat16.
template <class F>
void with_compute_type(DataType dt, F&& f) {
  switch (dt) {
    case DataType::int8:
      return f(std::int8_t{});
    case DataType::uint8:
      return f(std::uint8_t{});
    case DataType::int32:
      return f(std::int32_t{});
    case DataType::uint32:
      return f(std::uint32_t{});
    case DataType::int64:
      return f(std::int64_t{});
    case DataType::uint64:
      return f(std::uint64_t{});
    case DataType::float16:
    case DataType::bfloat16:
    case DataType::float32:
      return f(float{});
    case DataType::float64:
      return f(double{});
  }
}

// Stores v (of dt's compute type T) as element i of p, rounding to the 16-bit float types.
template <class T>
void put_elem(void* p, std::size_t i, DataType dt, T v) {
  if constexpr (std::is_same_v<T, float>) {
    if (dt == DataType::float16) {
      static_cast<std::uint16_t*>(p)[i] = float_to_half(v);
      return;
    }
    if (dt == DataType::bfloat16) {
      static_cast<std::uint16_t*>(p)[i] = float_to_bfloat16(v);
      return;
    }
  }
  static_cast<T*>(p)[i] = v;
}

// Value v stored as dtype (integers wrap, as the kernels do).
inline void store(void* p, std::size_t i, DataType dt, double v) {
  with_compute_type(dt, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_integral_v<T>) {
      put_elem<T>(p, i, dt, static_cast<T>(static_cast<long long>(v)));
    } else {
      put_elem<T>(p, i, dt, static_cast<T>(v));
    }
  });
}

// Reference reduction of base values of ranks 0..n-1 at element index i (integers wrap, as
// the kernels do).
template <class T>
T reference_value(int n, std::size_t i, ReduceOp op) {
  T acc = static_cast<T>(base_value(0, i, op));
  for (int r = 1; r < n; ++r) {
    const T v = static_cast<T>(base_value(r, i, op));
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
        } else {
          acc += v;
        }
        break;
      case ReduceOp::prod:
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          acc = static_cast<T>(static_cast<std::uint64_t>(static_cast<U>(acc)) * static_cast<U>(v));
        } else {
          acc *= v;
        }
        break;
      case ReduceOp::min:
        acc = v < acc ? v : acc;
        break;
      case ReduceOp::max:
        acc = acc < v ? v : acc;
        break;
    }
  }
  if (op == ReduceOp::avg) {
    acc = static_cast<T>(acc / static_cast<T>(n));
  }
  return acc;
}

// The reference result for element index i, stored at dst[j].
inline void store_reference(void* dst, std::size_t j, DataType dt, int n, std::size_t i,
                            ReduceOp op) {
  with_compute_type(dt, [&](auto zero) {
    using T = decltype(zero);
    put_elem<T>(dst, j, dt, reference_value<T>(n, i, op));
  });
}

// A rank's buffers for one case. `in` and `out` are the tensors to pass to the collective.
struct RankBuffers {
  std::vector<std::byte> a;  // input storage (or the only buffer, in place)
  std::vector<std::byte> b;  // output storage
  SharedBuffer shared_a;     // the same in SharedBuffers, made with make_buffers(..., true)
  SharedBuffer shared_b;
  Tensor in;
  Tensor out;
};

inline std::size_t in_count(const Case& c) {
  switch (c.kind) {
    case OpType::reduce_scatter:
    case OpType::scatter:
      return c.count * static_cast<std::size_t>(c.n);
    default:
      return c.count;
  }
}
inline std::size_t out_count(const Case& c) {
  switch (c.kind) {
    case OpType::allgather:
    case OpType::gather:
      return c.count * static_cast<std::size_t>(c.n);
    default:
      return c.count;
  }
}

// `shared`: the storage is two SharedBuffers (include/chorus/shared_buffer.hpp).
inline RankBuffers make_buffers(const Case& c, int rank, bool shared = false) {
  RankBuffers rb;
  const std::size_t es = element_size(c.dtype);
  const std::size_t ic = in_count(c);
  const std::size_t oc = out_count(c);
  const auto un = static_cast<std::size_t>(c.n);
  const auto ur = static_cast<std::size_t>(rank);
  const std::size_t bytes = std::max(ic, oc) * es + 8;
  void* a = nullptr;
  void* b = nullptr;
  if (shared) {
    rb.shared_a = SharedBuffer(bytes);
    rb.shared_b = SharedBuffer(bytes);
    a = std::memset(rb.shared_a.data(), 0x5a, bytes);
    b = std::memset(rb.shared_b.data(), 0x5a, bytes);
  } else {
    rb.a.assign(bytes, std::byte{0x5a});
    rb.b.assign(bytes, std::byte{0x5a});
    a = rb.a.data();
    b = rb.b.data();
  }
  // Output storage starts as garbage so that "nothing written" fails the check.
  switch (c.kind) {
    case OpType::allreduce:
    case OpType::reduce:
    case OpType::all_to_all:
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype, static_cast<double>(base_value(rank, i, c.op)));
      }
      rb.in = Tensor(a, ic, c.dtype);
      rb.out = c.in_place ? rb.in : Tensor(b, oc, c.dtype);
      if (c.kind == OpType::reduce && rank != c.root && c.in_place) {
        rb.out = rb.in;
      }
      break;
    case OpType::broadcast:
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype,
              rank == c.root ? static_cast<double>(base_value(rank, i, c.op)) : 99.0);
      }
      rb.in = rb.out = Tensor(a, ic, c.dtype);
      break;
    case OpType::allgather:
    case OpType::gather: {
      // Output in b; input either separate (a) or block `rank` of the output.
      rb.out = Tensor(b, oc, c.dtype);
      const bool inside = c.in_place && (c.kind == OpType::allgather || rank == c.root);
      void* in = inside ? static_cast<void*>(static_cast<std::byte*>(b) + ur * c.count * es) : a;
      for (std::size_t i = 0; i < c.count; ++i) {
        store(in, i, c.dtype, static_cast<double>(base_value(rank, i, c.op)));
      }
      rb.in = Tensor(in, c.count, c.dtype);
      break;
    }
    case OpType::reduce_scatter:
    case OpType::scatter: {
      const bool has_input = c.kind == OpType::reduce_scatter || rank == c.root;
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype, has_input ? static_cast<double>(base_value(rank, i, c.op)) : 77.0);
      }
      rb.in = Tensor(a, ic, c.dtype);
      const bool inside = c.in_place && has_input;
      rb.out = inside ? Tensor(static_cast<std::byte*>(a) + ur * c.count * es, c.count, c.dtype)
                      : Tensor(b, oc, c.dtype);
      break;
    }
    case OpType::barrier:
    case OpType::allgatherv:  // the variable-size collectives have cases of their own
    case OpType::reduce_scatterv:
    case OpType::all_to_allv:
    case OpType::send:  // point-to-point: not a collective case
    case OpType::recv:
      break;
  }
  (void)un;
  return rb;
}

// Empty if rank's result is right; otherwise the first wrong element, described.
inline std::string check_result(const Case& c, int rank, const RankBuffers& rb) {
  const std::size_t es = element_size(c.dtype);
  const auto un = static_cast<std::size_t>(c.n);
  const auto ur = static_cast<std::size_t>(rank);
  std::vector<std::byte> want;
  const void* got = rb.out.data();
  std::size_t n_out = 0;
  // Sizes `want` for `count` elements and fills element k with fill(k).
  auto expect = [&](std::size_t count, auto fill) {
    n_out = count;
    want.resize(count * es + 1);
    for (std::size_t k = 0; k < count; ++k) {
      fill(k);
    }
  };
  // Element k of `want` is rank q's input element i.
  auto input_of = [&](std::size_t k, int q, std::size_t i) {
    store(want.data(), k, c.dtype, static_cast<double>(base_value(q, i, c.op)));
  };
  // Element k of `want` is the reduction of every rank's input element first + k.
  auto reduced = [&](std::size_t first) {
    expect(c.count,
           [&](std::size_t k) { store_reference(want.data(), k, c.dtype, c.n, first + k, c.op); });
  };
  switch (c.kind) {
    case OpType::reduce:
      if (rank != c.root) {
        return {};
      }
      reduced(0);
      break;
    case OpType::allreduce:
      reduced(0);
      break;
    case OpType::reduce_scatter:
      reduced(ur * c.count);
      break;
    case OpType::broadcast:
      expect(c.count, [&](std::size_t k) { input_of(k, c.root, k); });
      break;
    case OpType::allgather:
    case OpType::gather:
      if (c.kind == OpType::gather && rank != c.root) {
        return {};
      }
      expect(c.count * un,
             [&](std::size_t k) { input_of(k, static_cast<int>(k / c.count), k % c.count); });
      break;
    case OpType::scatter:
      expect(c.count, [&](std::size_t k) { input_of(k, c.root, ur * c.count + k); });
      break;
    case OpType::all_to_all: {
      const std::size_t m = c.count / un;
      expect(c.count, [&](std::size_t k) {
        if (k < un * m) {
          input_of(k, static_cast<int>(k / m), ur * m + k % m);
        }
      });
      break;
    }
    case OpType::barrier:
    case OpType::allgatherv:
    case OpType::reduce_scatterv:
    case OpType::all_to_allv:
    case OpType::send:
    case OpType::recv:
      return {};
  }
  for (std::size_t i = 0; i < n_out; ++i) {
    if (std::memcmp(static_cast<const std::byte*>(got) + i * es, want.data() + i * es, es) != 0) {
      std::uint64_t g = 0;
      std::uint64_t w = 0;
      std::memcpy(&g, static_cast<const std::byte*>(got) + i * es, es);
      std::memcpy(&w, want.data() + i * es, es);
      return fmt::format("{}: rank {} element {} of {} is 0x{:x}, expected 0x{:x}", c.describe(),
                         rank, i, n_out, g, w);
    }
  }
  return {};
}

// The signature header a loopback run carries. The schedule carries it as opaque bytes and
// compares it with its peers', so any value every rank agrees on will do: it holds every field
// of the case, applicable or not. What the bytes of a signature are is checked against
// hand-written encodings in kernels_test.cpp; what a real group puts in them, by the
// mismatch messages of failures_mp_test.cpp.
inline OpSignature header_of(const Case& c, std::uint64_t seq) {
  return OpSignature{c.kind, c.dtype, c.op, c.root, c.count, seq};
}

}  // namespace chorus::test
