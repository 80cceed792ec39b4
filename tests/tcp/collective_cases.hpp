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

#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

#include "core/half.hpp"
#include "core/signature.hpp"

namespace chorus::test {

struct Case {
  OpKind kind = OpKind::allreduce;
  int n = 1;
  std::size_t count = 0;  // as OpSignature::count: per-rank elements (all_to_all: total)
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool in_place = false;

  std::string describe() const {
    return fmt::format("{} n={} count={} {} {} root={} {}", to_string(kind), n, count,
                       to_string(dtype), to_string(op), root, in_place ? "in-place" : "out-of-place");
  }
};

inline long long base_value(int rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::prod) {
    static constexpr int kVals[] = {1, -1, 2, 1, -2, 1};
    return kVals[(static_cast<std::size_t>(rank) * 5 + i) % 6];
  }
  return static_cast<long long>((static_cast<std::size_t>(rank + 1) * 3 + i * 5) % 7) - 2;
}

// Typed helpers: value v stored as dtype (integers wrap, as the kernels do).
inline void store(void* p, std::size_t i, DataType dt, double v) {
  switch (dt) {
    case DataType::int8:
      static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(static_cast<long long>(v));
      break;
    case DataType::uint8:
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(static_cast<long long>(v));
      break;
    case DataType::int32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(static_cast<long long>(v));
      break;
    case DataType::uint32:
      static_cast<std::uint32_t*>(p)[i] = static_cast<std::uint32_t>(static_cast<long long>(v));
      break;
    case DataType::int64:
      static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      break;
    case DataType::uint64:
      static_cast<std::uint64_t*>(p)[i] = static_cast<std::uint64_t>(static_cast<long long>(v));
      break;
    case DataType::float16:
      static_cast<std::uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::bfloat16:
      static_cast<std::uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::float32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::float64:
      static_cast<double*>(p)[i] = v;
      break;
  }
}

// Reference reduction of base values of ranks 0..n-1 at element index i, stored at dst[j].
template <class T>
T ref_int(int n, std::size_t i, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  T acc = static_cast<T>(base_value(0, i, op));
  for (int r = 1; r < n; ++r) {
    const T v = static_cast<T>(base_value(r, i, op));
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
        break;
      case ReduceOp::prod:
        acc = static_cast<T>(static_cast<std::uint64_t>(static_cast<U>(acc)) * static_cast<U>(v));
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

template <class F>
F ref_float(int n, std::size_t i, ReduceOp op) {
  F acc = static_cast<F>(base_value(0, i, op));
  for (int r = 1; r < n; ++r) {
    const F v = static_cast<F>(base_value(r, i, op));
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc += v;
        break;
      case ReduceOp::prod:
        acc *= v;
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
    acc /= static_cast<F>(n);
  }
  return acc;
}

inline void store_reference(void* dst, std::size_t j, DataType dt, int n, std::size_t i, ReduceOp op) {
  switch (dt) {
    case DataType::int8:
      static_cast<std::int8_t*>(dst)[j] = ref_int<std::int8_t>(n, i, op);
      break;
    case DataType::uint8:
      static_cast<std::uint8_t*>(dst)[j] = ref_int<std::uint8_t>(n, i, op);
      break;
    case DataType::int32:
      static_cast<std::int32_t*>(dst)[j] = ref_int<std::int32_t>(n, i, op);
      break;
    case DataType::uint32:
      static_cast<std::uint32_t*>(dst)[j] = ref_int<std::uint32_t>(n, i, op);
      break;
    case DataType::int64:
      static_cast<std::int64_t*>(dst)[j] = ref_int<std::int64_t>(n, i, op);
      break;
    case DataType::uint64:
      static_cast<std::uint64_t*>(dst)[j] = ref_int<std::uint64_t>(n, i, op);
      break;
    case DataType::float16:
      static_cast<std::uint16_t*>(dst)[j] = float_to_half(ref_float<float>(n, i, op));
      break;
    case DataType::bfloat16:
      static_cast<std::uint16_t*>(dst)[j] = float_to_bfloat16(ref_float<float>(n, i, op));
      break;
    case DataType::float32:
      static_cast<float*>(dst)[j] = ref_float<float>(n, i, op);
      break;
    case DataType::float64:
      static_cast<double*>(dst)[j] = ref_float<double>(n, i, op);
      break;
  }
}

// A rank's buffers for one case. `in` and `out` are the tensors to pass to the collective.
struct RankBuffers {
  std::vector<std::byte> a;  // input storage (or the only buffer, in place)
  std::vector<std::byte> b;  // output storage
  Tensor in;
  Tensor out;
};

inline std::size_t in_count(const Case& c) {
  switch (c.kind) {
    case OpKind::reduce_scatter:
      return c.count * static_cast<std::size_t>(c.n);
    case OpKind::scatter:
      return c.count * static_cast<std::size_t>(c.n);
    default:
      return c.count;
  }
}
inline std::size_t out_count(const Case& c) {
  switch (c.kind) {
    case OpKind::allgather:
    case OpKind::gather:
      return c.count * static_cast<std::size_t>(c.n);
    case OpKind::reduce_scatter:
    case OpKind::scatter:
      return c.count;
    default:
      return c.count;
  }
}

inline RankBuffers make_buffers(const Case& c, int rank) {
  RankBuffers rb;
  const std::size_t es = element_size(c.dtype);
  const std::size_t ic = in_count(c);
  const std::size_t oc = out_count(c);
  const auto un = static_cast<std::size_t>(c.n);
  const auto ur = static_cast<std::size_t>(rank);
  rb.a.assign(std::max(ic, oc) * es + 8, std::byte{0x5a});
  rb.b.assign(std::max(ic, oc) * es + 8, std::byte{0x5a});
  void* a = rb.a.data();
  void* b = rb.b.data();
  // Output storage starts as garbage so that "nothing written" fails the check.
  switch (c.kind) {
    case OpKind::allreduce:
    case OpKind::reduce:
    case OpKind::all_to_all:
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype, static_cast<double>(base_value(rank, i, c.op)));
      }
      rb.in = Tensor(a, ic, c.dtype);
      rb.out = c.in_place ? rb.in : Tensor(b, oc, c.dtype);
      if (c.kind == OpKind::reduce && rank != c.root && c.in_place) {
        rb.out = rb.in;
      }
      break;
    case OpKind::broadcast:
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype, rank == c.root ? static_cast<double>(base_value(rank, i, c.op)) : 99.0);
      }
      rb.in = rb.out = Tensor(a, ic, c.dtype);
      break;
    case OpKind::allgather:
    case OpKind::gather: {
      // Output in b; input either separate (a) or block `rank` of the output.
      rb.out = Tensor(b, oc, c.dtype);
      const bool inside = c.in_place && (c.kind == OpKind::allgather || rank == c.root);
      void* in = inside ? static_cast<void*>(static_cast<std::byte*>(b) + ur * c.count * es) : a;
      for (std::size_t i = 0; i < c.count; ++i) {
        store(in, i, c.dtype, static_cast<double>(base_value(rank, i, c.op)));
      }
      rb.in = Tensor(in, c.count, c.dtype);
      break;
    }
    case OpKind::reduce_scatter:
    case OpKind::scatter: {
      const bool has_input = c.kind == OpKind::reduce_scatter || rank == c.root;
      for (std::size_t i = 0; i < ic; ++i) {
        store(a, i, c.dtype, has_input ? static_cast<double>(base_value(rank, i, c.op)) : 77.0);
      }
      rb.in = Tensor(a, ic, c.dtype);
      const bool inside = c.in_place && has_input;
      rb.out = inside ? Tensor(static_cast<std::byte*>(a) + ur * c.count * es, c.count, c.dtype)
                      : Tensor(b, oc, c.dtype);
      break;
    }
    case OpKind::barrier:
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
  switch (c.kind) {
    case OpKind::allreduce:
      n_out = c.count;
      want.resize(n_out * es + 1);
      for (std::size_t i = 0; i < n_out; ++i) {
        store_reference(want.data(), i, c.dtype, c.n, i, c.op);
      }
      break;
    case OpKind::reduce:
      if (rank != c.root) {
        return {};
      }
      n_out = c.count;
      want.resize(n_out * es + 1);
      for (std::size_t i = 0; i < n_out; ++i) {
        store_reference(want.data(), i, c.dtype, c.n, i, c.op);
      }
      break;
    case OpKind::reduce_scatter:
      n_out = c.count;
      want.resize(n_out * es + 1);
      for (std::size_t i = 0; i < n_out; ++i) {
        store_reference(want.data(), i, c.dtype, c.n, ur * c.count + i, c.op);
      }
      break;
    case OpKind::broadcast:
      n_out = c.count;
      want.resize(n_out * es + 1);
      for (std::size_t i = 0; i < n_out; ++i) {
        store(want.data(), i, c.dtype, static_cast<double>(base_value(c.root, i, c.op)));
      }
      break;
    case OpKind::allgather:
    case OpKind::gather:
      if (c.kind == OpKind::gather && rank != c.root) {
        return {};
      }
      n_out = c.count * un;
      want.resize(n_out * es + 1);
      for (std::size_t q = 0; q < un; ++q) {
        for (std::size_t i = 0; i < c.count; ++i) {
          store(want.data(), q * c.count + i, c.dtype,
                static_cast<double>(base_value(static_cast<int>(q), i, c.op)));
        }
      }
      break;
    case OpKind::scatter:
      n_out = c.count;
      want.resize(n_out * es + 1);
      for (std::size_t i = 0; i < n_out; ++i) {
        store(want.data(), i, c.dtype, static_cast<double>(base_value(c.root, ur * c.count + i, c.op)));
      }
      break;
    case OpKind::all_to_all: {
      n_out = c.count;
      want.resize(n_out * es + 1);
      const std::size_t m = c.count / un;
      for (std::size_t q = 0; q < un; ++q) {
        for (std::size_t i = 0; i < m; ++i) {
          store(want.data(), q * m + i, c.dtype,
                static_cast<double>(base_value(static_cast<int>(q), ur * m + i, c.op)));
        }
      }
      break;
    }
    case OpKind::barrier:
      return {};
  }
  for (std::size_t i = 0; i < n_out; ++i) {
    if (std::memcmp(static_cast<const std::byte*>(got) + i * es, want.data() + i * es, es) != 0) {
      std::uint64_t g = 0;
      std::uint64_t w = 0;
      std::memcpy(&g, static_cast<const std::byte*>(got) + i * es, es);
      std::memcpy(&w, want.data() + i * es, es);
      return fmt::format("{}: rank {} element {} of {} is 0x{:x}, expected 0x{:x}", c.describe(), rank, i,
                         n_out, g, w);
    }
  }
  return {};
}

inline OpSignature signature_of(const Case& c, std::uint64_t seq) {
  OpSignature s;
  s.kind = c.kind;
  s.seq = seq;
  if (c.kind == OpKind::barrier) {
    return s;
  }
  s.dtype = c.dtype;
  s.count = c.count;
  if (c.kind == OpKind::allreduce || c.kind == OpKind::reduce || c.kind == OpKind::reduce_scatter) {
    s.redop = c.op;
  }
  if (c.kind == OpKind::broadcast || c.kind == OpKind::reduce || c.kind == OpKind::gather ||
      c.kind == OpKind::scatter) {
    s.root = c.root;
  }
  return s;
}

}  // namespace chorus::test
