// SPDX-License-Identifier: BSD-3-Clause
// The narrower wire between hosts (core/wire.hpp, AllreduceOptions::wire_dtype) over real
// processes, each rank its own "host" (CHORUS_HOST_ID) unless a case says otherwise:
// - every algorithm that takes the wire gives every rank the same bits, within the stated bound
//   of an exact (long double) sum, and with a smaller error than compressing the inputs first
//   and summing in 16 bits (what torch DDP's bf16_compress_hook does);
// - the bound holds over the data type's whole range: sums from float32's denormals to 3e38
//   and from float64's denormals to 1.7e308 come back finite, never flushed, within the bound,
//   on both 16-bit wires and the float32 wire, at 2 and 4 hosts;
// - the wire is really used (the result differs from full precision), except inside one host;
// - the group default (CHORUS_WIRE_DTYPE) applies to float sums only;
// - ops small enough for the latency algorithms (recursive doubling) keep full precision, so
//   the cases here are above TcpGroupOptions::small_allreduce_bytes;
// - ranks that disagree about the wire fail naming it; bad arguments are named before anything
//   is sent.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/half.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Rank r's input element i: magnitudes over several binades and both signs, reproducible on
// every rank (each rank checks the whole result against the exact sum).
double input(int rank, std::size_t i) {
  std::uint64_t x =
      (static_cast<std::uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) * 0x1p-53;  // [0, 1)
  const double scale = std::ldexp(1.0, static_cast<int>(x % 7) - 3);
  return (unit - 0.5) * scale;
}

// The unit roundoff of a wire: half its precision's ulp.
double unit_roundoff(DataType wire) {
  return wire == DataType::bfloat16 ? 0x1p-8 : wire == DataType::float16 ? 0x1p-11 : 0x1p-24;
}

// The stated bound's other constant (docs/architecture.md, "A narrower wire between hosts"): an
// element whose slice holds much larger ones may be off by eta times the op's largest sum of
// magnitudes per rounding (float16: it keeps the wire's precision down to 2^-29 of its
// slice's largest value, and its denormals reach 2^-40).
double eta(DataType wire) { return wire == DataType::float16 ? 0x1p-39 : 0x1p-259; }

struct Accuracy {
  double max_over_bound = 0;  // max |error| / bound; <= 1 passes
  double rms_error = 0;       // relative to the rms of the exact result
  std::size_t inexact = 0;    // elements that differ from the exact sum rounded to the dtype
  bool finite = true;         // no inf or NaN
};

// Checks result (count elements of T, the op over n ranks, rank r's element i being
// value(r, first + i)) against the exact sum: per element
//   |result - exact| <= gamma * sum|x| + (n + 1) * eta * A,
//   gamma = (1 + u)^(n + 1) * (1 + u_T)^n - 1 (about (n + 1) * u),
// where A is the largest sum|x| of the op's elements: at most n + 1 roundings to the wire (the
// first hop's input, the partial sums on their way, the final value) and n - 1 additions and a
// division in T on any element's path. An average divides exact, sum|x| and A by n, and a
// result below T's smallest normal carries the division's own rounding, half T's smallest
// denormal, as at full precision.
template <class T, class Value>
Accuracy accuracy_of(const std::vector<T>& result, int n, std::size_t first, DataType wire,
                     bool avg, const Value& value) {
  Accuracy a;
  const double u = unit_roundoff(wire);
  const double u_data = std::numeric_limits<T>::epsilon() / 2;
  const double gamma = std::pow(1 + u, n + 1) * std::pow(1 + u_data, n) - 1;
  std::vector<long double> exact(result.size());
  std::vector<long double> magnitude(result.size());
  long double largest = 0;
  for (std::size_t i = 0; i < result.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      const auto x = static_cast<long double>(static_cast<T>(value(r, first + i)));
      exact[i] += x;
      magnitude[i] += std::abs(x);
    }
    if (avg) {
      exact[i] /= n;
      magnitude[i] /= n;
    }
    largest = std::max(largest, magnitude[i]);
  }
  const long double floor =
      (n + 1) * eta(wire) * largest + (avg ? std::numeric_limits<T>::denorm_min() / 2 : 0);
  long double err2 = 0;
  long double ref2 = 0;
  for (std::size_t i = 0; i < result.size(); ++i) {
    a.finite = a.finite && std::isfinite(result[i]);
    const long double err = std::abs(static_cast<long double>(result[i]) - exact[i]);
    const long double bound = gamma * magnitude[i] + floor;
    const long double ratio = bound > 0 ? err / bound : (err == 0 ? 0 : INFINITY);
    a.max_over_bound = std::max(a.max_over_bound, static_cast<double>(ratio));
    a.inexact += static_cast<T>(exact[i]) != result[i] ? 1 : 0;
    err2 += err * err;
    ref2 += exact[i] * exact[i];
  }
  a.rms_error = ref2 > 0 ? static_cast<double>(std::sqrt(err2 / ref2)) : 0;
  return a;
}

// The bound for the inputs of input().
template <class T>
Accuracy accuracy(const std::vector<T>& result, int n, std::size_t first, DataType wire, bool avg) {
  return accuracy_of(result, n, first, wire, avg, input);
}

// What bf16_compress_hook computes for the same inputs: each input rounded to bfloat16, summed
// in bfloat16 (every addition rounded), relative rms error against the exact sum.
double compress_first_rms_error(int n, std::size_t count) {
  double err2 = 0;
  double ref2 = 0;
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0;
    double exact = 0;
    for (int r = 0; r < n; ++r) {
      const auto x = static_cast<float>(input(r, i));
      exact += x;
      sum = bfloat16_to_float(float_to_bfloat16(sum + bfloat16_to_float(float_to_bfloat16(x))));
    }
    err2 += (sum - exact) * (sum - exact);
    ref2 += exact * exact;
  }
  return std::sqrt(err2 / ref2);
}

template <class T>
std::vector<T> inputs(int rank, std::size_t count, std::size_t first = 0) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = static_cast<T>(input(rank, first + i));
  }
  return v;
}

// A hash of the bytes, gathered from every rank: they must all be equal.
void same_bits_everywhere(ProcessGroup& pg, const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < bytes; ++i) {
    h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  }
  std::vector<std::uint64_t> all(static_cast<std::size_t>(pg.size()));
  pg.allgather(Tensor::of(&h, 1), Tensor::of(all.data(), all.size()))->wait();
  for (std::uint64_t x : all) {
    CHILD_CHECK(x == h);
  }
}

// slice_bytes > 0: pipeline slices of that many bytes, and no latency algorithm, so that small
// buffers still travel in several slices per chunk.
std::shared_ptr<ProcessGroup> group_on(const std::shared_ptr<Store>& store, int rank, int n,
                                       const std::string& name, const char* algo,
                                       std::size_t slice_bytes = 0) {
  if (algo != nullptr) {
    ::setenv("CHORUS_ALGO", algo, 1);
  } else {
    ::unsetenv("CHORUS_ALGO");
  }
  TcpGroupOptions o = loopback_options(60s);
  o.group.name = name;
  if (slice_bytes > 0) {
    o.slice_bytes = slice_bytes;
    o.small_allreduce_bytes = 0;
  }
  auto pg = make_tcp_group(store, rank, n, o);
  ::unsetenv("CHORUS_ALGO");
  return pg;
}

// Runs fn(rank, store) on n ranks, each rank a "host" of its own (CHORUS_HOST_ID) unless
// host_of names its host; every rank must succeed within `limit`.
void on_hosts(int n, Duration limit,
              const std::function<void(int, const std::shared_ptr<Store>&)>& fn,
              const std::function<std::string(int)>& host_of = {}) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        const std::string host = host_of ? host_of(rank) : fmt::format("host-{}", rank);
        ::setenv("CHORUS_HOST_ID", host.c_str(), 1);
        fn(rank, child_store(server.port()));
      },
      limit);
  REQUIRE_ALL_OK(results);
}

constexpr std::size_t kCount = 300'007;  // several 256 KiB slices per chunk, odd

// One allreduce of the inputs with `wire`, in place; checks identical bits and the bound.
// Returns the accuracy (rank 0 prints it).
template <class T>
Accuracy allreduce_with(ProcessGroup& pg, DataType wire, ReduceOp op, std::size_t count) {
  auto data = inputs<T>(pg.rank(), count);
  pg.allreduce(Tensor::of(data.data(), data.size()), {.op = op, .wire_dtype = wire})->wait();
  same_bits_everywhere(pg, data.data(), data.size() * sizeof(T));
  const Accuracy a = accuracy(data, pg.size(), 0, wire, op == ReduceOp::avg);
  CHILD_CHECK(a.max_over_bound <= 1.0 && a.finite);
  return a;
}

// ---- the range sweep ----
using Value = std::function<double(int, std::size_t)>;

// Rank r's element i for a sum of magnitude about `sum`: sum / n times a factor in [0.5, 1),
// with element i's sign on every rank (so the exact sum is about `sum`, and a result flushed to
// zero is far outside the bound).
Value swept(double sum, int n) {
  return [sum, n](int r, std::size_t i) {
    const double f = 0.5 + std::abs(input(r, i)) / 8;  // |input| < 4
    return (i % 3 == 0 ? -f : f) * (sum / n);
  };
}

// Every element's magnitude differs from its neighbours' by 2^37, wrapping over `binades`
// binades from 2^top down: each slice holds the data type's whole range, so the small elements
// meet the bound's eta term.
Value spread(int top, int binades) {
  return [top, binades](int r, std::size_t i) {
    const int e = top - static_cast<int>(i * 37 % static_cast<std::size_t>(binades));
    return std::ldexp(0.5 + std::abs(input(r, i)) / 8, e);
  };
}

constexpr std::size_t kSweepCount = 3001;       // chunks of several slices at 4 ranks
constexpr std::size_t kSweepSliceBytes = 1024;  // group_on(): 256 float32, 128 float64

const std::vector<double> kFloatSums = {1e-44, 1e-40, 1e-38, 1e-30, 1e-20, 1e-10, 1e-6, 1e-3, 1,
                                        1e3,   8e4,   1e6,   1e10,  1e20,  1e30,  1e38, 3e38};
const std::vector<double> kDoubleSums = {1e-320, 1e-310, 1e-300, 1e-200, 1e-100, 1e-38,
                                         1,      1e38,   1e100,  1e200,  1e300,  1.7e308};

struct SweepCase {
  const char* what;  // "allreduce", "reduce", "reduce_scatter"
  DataType wire;
  ReduceOp op;
  double sum;  // 0: spread()
};

// Runs one op of the sweep on data of type T and checks the bound on the ranks that hold a
// result, its finiteness and, for allreduce, the same bits everywhere.
template <class T>
void sweep_one(ProcessGroup& pg, const SweepCase& c, const std::string& algo) {
  const int n = pg.size();
  const int rank = pg.rank();
  const Value value = c.sum > 0
                          ? swept(c.sum, n)
                          : (std::is_same_v<T, float> ? spread(100, 250) : spread(1000, 2075));
  const bool avg = c.op == ReduceOp::avg;
  const std::string name = fmt::format(
      "{} {} of {} x {} ({}), {} wire, {}", c.what, to_string(c.op), kSweepCount,
      sizeof(T) == 4 ? "float32" : "float64",
      c.sum > 0 ? fmt::format("sums about {:g}", c.sum) : std::string("every magnitude in a slice"),
      to_string(c.wire), algo);
  auto check = [&](const Accuracy& a, std::size_t count) {
    if (rank == 0 && n == 4 && algo == "allreduce=ring") {  // docs/results.md's range table
      std::fprintf(stderr, "sweep: %s: rms error %.3g, max error / bound %.2f\n", name.c_str(),
                   a.rms_error, a.max_over_bound);
    }
    if (!a.finite || a.max_over_bound > 1.0) {
      throw ChildCheckFailed{
          fmt::format("{}: finite {}, max error / bound {:g}", name, a.finite, a.max_over_bound)};
    }
    // Inputs of 24 or 53 bits with sums in the normal range: on the wire most come back
    // inexact (at full precision few would).
    const double lo = sizeof(T) == 4 ? 1e-30 : 1e-300;
    if (c.sum >= lo && c.sum <= 1 / lo && a.inexact < count / 2) {
      throw ChildCheckFailed{
          fmt::format("{}: {} of {} inexact, the wire was not used", name, a.inexact, count)};
    }
  };
  std::vector<T> in(kSweepCount);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<T>(value(rank, i));
  }
  if (std::string_view(c.what) == "allreduce") {
    pg.allreduce(Tensor::of(in.data(), in.size()), {.op = c.op, .wire_dtype = c.wire})->wait();
    same_bits_everywhere(pg, in.data(), in.size() * sizeof(T));
    check(accuracy_of(in, n, 0, c.wire, avg, value), in.size());
  } else if (std::string_view(c.what) == "reduce") {
    std::vector<T> out(in.size(), T{-1});
    pg.reduce(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()),
              {.op = c.op, .root = 1, .wire_dtype = c.wire})
        ->wait();
    if (rank == 1) {
      check(accuracy_of(out, n, 0, c.wire, avg, value), out.size());
    }
  } else {
    const std::size_t block = in.size() / static_cast<std::size_t>(n);
    std::vector<T> out(block, T{-1});
    pg.reduce_scatter(Tensor::of(in.data(), block * static_cast<std::size_t>(n)),
                      Tensor::of(out.data(), block), {.op = c.op, .wire_dtype = c.wire})
        ->wait();
    check(accuracy_of(out, n, static_cast<std::size_t>(rank) * block, c.wire, avg, value),
          out.size());
  }
}

// Every float32 sum of kFloatSums on both 16-bit wires, every float64 sum of kDoubleSums on the
// float32 wire, and the spread data on each, as `what` (avg for a few). Returns the ops run.
int sweep(ProcessGroup& pg, const char* what, const std::string& algo) {
  int ops = 0;
  for (DataType wire : {DataType::bfloat16, DataType::float16}) {
    for (double sum : kFloatSums) {
      sweep_one<float>(pg, {what, wire, ReduceOp::sum, sum}, algo);
      ++ops;
    }
    sweep_one<float>(pg, {what, wire, ReduceOp::sum, 0}, algo);
    for (double sum : {1e-30, 1e-6, 8e4, 3e38}) {
      sweep_one<float>(pg, {what, wire, ReduceOp::avg, sum}, algo);
    }
    ops += 5;
  }
  for (double sum : kDoubleSums) {
    sweep_one<double>(pg, {what, DataType::float32, ReduceOp::sum, sum}, algo);
    ++ops;
  }
  sweep_one<double>(pg, {what, DataType::float32, ReduceOp::sum, 0}, algo);
  sweep_one<double>(pg, {what, DataType::float32, ReduceOp::avg, 1e300}, algo);
  return ops + 2;
}

}  // namespace

TEST_CASE(
    "a 16-bit wire between hosts: same bits on every rank, within the bound, better than "
    "compressing first",
    "[tcp][mp][wire]") {
  constexpr int n = 4;
  on_hosts(n, 150s, [&](int rank, const std::shared_ptr<Store>& store) {
    const double compress_first = compress_first_rms_error(n, kCount);
    for (const char* algo : {"allreduce=ring", "allreduce=halving_doubling"}) {
      auto pg = group_on(store, rank, n, algo, algo);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        const Accuracy bf16 = allreduce_with<float>(*pg, DataType::bfloat16, op, kCount);
        CHILD_CHECK(bf16.inexact > kCount / 2);  // the wire was used
        const Accuracy fp16 = allreduce_with<float>(*pg, DataType::float16, op, kCount);
        CHILD_CHECK(fp16.inexact > kCount / 4);
        if (op == ReduceOp::sum) {
          CHILD_CHECK(bf16.rms_error < compress_first);
        }
        if (rank == 0) {
          std::fprintf(stderr,
                       "%s %s: rms error bf16 wire %.3g, fp16 wire %.3g, bf16 inputs summed "
                       "in bf16 %.3g; max error / bound %.2f, %.2f\n",
                       algo, to_string(op), bf16.rms_error, fp16.rms_error, compress_first,
                       bf16.max_over_bound, fp16.max_over_bound);
        }
      }
      // float64 data as float32, and full precision when the op asks for it.
      const Accuracy f64 = allreduce_with<double>(*pg, DataType::float32, ReduceOp::sum, 10'001);
      CHILD_CHECK(f64.inexact > 0);
      const Accuracy full = allreduce_with<float>(*pg, DataType::float32, ReduceOp::sum, 10'001);
      CHILD_CHECK(full.max_over_bound <= 1.0);
      // Out of place, and a size whose chunks end mid-slice.
      auto in = inputs<float>(rank, 70'001);
      std::vector<float> out(in.size(), -1.0f);
      pg->allreduce(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()),
                    {.wire_dtype = DataType::bfloat16})
          ->wait();
      same_bits_everywhere(*pg, out.data(), out.size() * sizeof(float));
      CHILD_CHECK(accuracy(out, n, 0, DataType::bfloat16, false).max_over_bound <= 1.0);
      CHILD_CHECK(in == inputs<float>(rank, in.size()));  // inputs are never rounded
    }
  });
}

TEST_CASE("reduce_scatter and reduce over a 16-bit wire stay within the bound", "[tcp][mp][wire]") {
  constexpr int n = 3;
  on_hosts(n, 120s, [&](int rank, const std::shared_ptr<Store>& store) {
    for (const char* algo : {"reduce=chain", "reduce=tree"}) {
      auto pg = group_on(store, rank, n, algo, algo);
      const std::size_t count = 100'003;
      auto in = inputs<float>(rank, count);
      std::vector<float> out(count, -1.0f);
      pg->reduce(Tensor::of(in.data(), count), Tensor::of(out.data(), count),
                 {.root = 1, .wire_dtype = DataType::bfloat16})
          ->wait();
      if (rank == 1) {
        const Accuracy a = accuracy(out, n, 0, DataType::bfloat16, false);
        CHILD_CHECK(a.max_over_bound <= 1.0 && a.inexact > 0);
      }
    }
    auto pg = group_on(store, rank, n, "rs", nullptr);
    const std::size_t block = 90'001;
    auto in = inputs<float>(rank, block * n);
    std::vector<float> out(block, -1.0f);
    pg->reduce_scatter(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), block),
                       {.op = ReduceOp::avg, .wire_dtype = DataType::bfloat16})
        ->wait();
    // Rank r's block starts at element r * block of everyone's input.
    const Accuracy a =
        accuracy(out, n, static_cast<std::size_t>(rank) * block, DataType::bfloat16, true);
    CHILD_CHECK(a.max_over_bound <= 1.0 && a.inexact > 0);
  });
}

TEST_CASE("two hosts of two ranks: full precision inside a host, the wire between, same bits",
          "[tcp][mp][wire]") {
  constexpr int n = 4;
  on_hosts(
      n, 150s,
      [&](int rank, const std::shared_ptr<Store>& store) {
        // The flat ring crosses hosts at every other step; the default here is hierarchical.
        for (const char* algo : {"allreduce=ring", static_cast<const char*>(nullptr)}) {
          auto pg = group_on(store, rank, n, algo != nullptr ? algo : "default", algo);
          allreduce_with<float>(*pg, DataType::bfloat16, ReduceOp::sum, kCount);
        }
        // One host: the wire has nothing to do, every transfer is full precision.
        ::setenv("CHORUS_HOST_ID", "one-host", 1);
        auto pg = group_on(store, rank, n, "one-host", "allreduce=ring");
        auto wired = inputs<float>(rank, 20'001);
        auto plain = wired;
        pg->allreduce(Tensor::of(wired.data(), wired.size()), {.wire_dtype = DataType::bfloat16})
            ->wait();
        pg->allreduce(Tensor::of(plain.data(), plain.size()))->wait();
        CHILD_CHECK(wired == plain);
      },
      [](int rank) -> std::string { return rank % 2 == 0 ? "host-a" : "host-b"; });
}

TEST_CASE("the wire keeps its bound over the whole range: 2 hosts", "[tcp][mp][wire]") {
  constexpr int n = 2;
  on_hosts(n, 120s, [&](int rank, const std::shared_ptr<Store>& store) {
    for (const char* algo : {"allreduce=ring", "allreduce=halving_doubling"}) {
      auto pg = group_on(store, rank, n, algo, algo, kSweepSliceBytes);
      const int ops = sweep(*pg, "allreduce", algo);
      if (rank == 0) {
        std::fprintf(stderr, "2 hosts, %s: %d sweep ops within the bound\n", algo, ops);
      }
    }
  });
}

TEST_CASE("the wire keeps its bound over the whole range: 4 hosts, every algorithm with a wire",
          "[tcp][mp][wire]") {
  constexpr int n = 4;
  on_hosts(n, 150s, [&](int rank, const std::shared_ptr<Store>& store) {
    for (const char* algo : {"allreduce=ring", "allreduce=halving_doubling", "reduce=chain",
                             "reduce=tree", "reduce_scatter"}) {
      auto pg =
          group_on(store, rank, n, algo,
                   std::string_view(algo) == "reduce_scatter" ? nullptr : algo, kSweepSliceBytes);
      const char* what = std::string_view(algo).starts_with("allreduce") ? "allreduce"
                         : std::string_view(algo).starts_with("reduce=") ? "reduce"
                                                                         : "reduce_scatter";
      const int ops = sweep(*pg, what, algo);
      if (rank == 0) {
        std::fprintf(stderr, "4 hosts, %s: %d sweep ops within the bound\n", algo, ops);
      }
    }
  });
}

TEST_CASE("the wire keeps its bound over the whole range: 2 hosts of 2 ranks (hierarchical)",
          "[tcp][mp][wire]") {
  constexpr int n = 4;
  on_hosts(
      n, 120s,
      [&](int rank, const std::shared_ptr<Store>& store) {
        auto pg = group_on(store, rank, n, "hier", "allreduce=hierarchical", kSweepSliceBytes);
        const int ops = sweep(*pg, "allreduce", "hierarchical");
        if (rank == 0) {
          std::fprintf(stderr, "2 hosts x 2 ranks, hierarchical: %d sweep ops within the bound\n",
                       ops);
        }
      },
      [](int rank) -> std::string { return rank % 2 == 0 ? "host-a" : "host-b"; });
}

TEST_CASE("CHORUS_WIRE_DTYPE is the group's default for float sums only; a bad value is named",
          "[tcp][mp][wire]") {
  constexpr int n = 2;
  on_hosts(n, 90s, [&](int rank, const std::shared_ptr<Store>& store) {
    ::setenv("CHORUS_WIRE_DTYPE", "bf16x", 1);
    const Error bad = expect_error([&] { group_on(store, rank, n, "bad", nullptr); });
    CHILD_CHECK(bad.code() == ErrorCode::invalid_argument &&
                contains(bad.what(), "CHORUS_WIRE_DTYPE='bf16x'"));
    ::setenv("CHORUS_WIRE_DTYPE", "bf16", 1);
    auto pg = group_on(store, rank, n, "bf16", nullptr);
    ::unsetenv("CHORUS_WIRE_DTYPE");
    auto f = inputs<float>(rank, kCount);
    pg->allreduce(Tensor::of(f.data(), f.size()))->wait();
    const Accuracy a = accuracy(f, n, 0, DataType::bfloat16, false);
    CHILD_CHECK(a.max_over_bound <= 1.0 && a.inexact > 0);
    // Integers and max keep full precision: exact.
    std::vector<std::int32_t> ints(kCount, rank + 1);
    pg->allreduce(Tensor::of(ints.data(), ints.size()))->wait();
    CHILD_CHECK(ints[0] == 3 && ints.back() == 3);
    auto m = inputs<float>(rank, kCount);
    pg->allreduce(Tensor::of(m.data(), m.size()), {.op = ReduceOp::max})->wait();
    for (std::size_t i = 0; i < m.size(); ++i) {
      CHILD_CHECK(m[i] ==
                  std::max(static_cast<float>(input(0, i)), static_cast<float>(input(1, i))));
    }
    // The op's own dtype overrides the default: exact sums of exactly representable values.
    std::vector<float> exact(kCount, 1.0f + 0x1p-20f);
    pg->allreduce(Tensor::of(exact.data(), exact.size()), {.wire_dtype = DataType::float32})
        ->wait();
    CHILD_CHECK(exact[7] == 2.0f + 0x1p-19f);
  });
}

TEST_CASE("ranks that disagree about the wire fail naming it; bad wire arguments are named",
          "[tcp][mp][wire]") {
  constexpr int n = 2;
  on_hosts(n, 90s, [&](int rank, const std::shared_ptr<Store>& store) {
    auto pg = group_on(store, rank, n, "args", nullptr);
    std::vector<float> f(1000, 1.0f);
    std::vector<std::int32_t> ints(1000, 1);
    auto invalid = [&](auto&& call, const char* says) {
      const Error e = expect_error(call);
      if (!(e.code() == ErrorCode::invalid_argument && contains(e.what(), says))) {
        throw ChildCheckFailed{fmt::format("wanted '{}', got: {}", says, e.what())};
      }
    };
    invalid(
        [&] {
          pg->allreduce(Tensor::of(ints.data(), ints.size()), {.wire_dtype = DataType::bfloat16});
        },
        "does not carry int32 data");
    invalid(
        [&] {
          pg->allreduce(Tensor::of(f.data(), f.size()),
                        {.op = ReduceOp::max, .wire_dtype = DataType::bfloat16});
        },
        "is for sum and avg");
    invalid(
        [&] {
          OpDescriptor d;
          d.type = OpType::broadcast;
          d.in = d.out = Tensor::of(f.data(), f.size());
          d.wire_dtype = DataType::bfloat16;
          pg->run(d);
        },
        "is for allreduce, reduce_scatter and reduce");
    // The group is unharmed by the rejected calls: nothing was sent.
    pg->allreduce(Tensor::of(f.data(), f.size()))->wait();
    CHILD_CHECK(f[0] == 2.0f);

    std::vector<float> big(200'000, 1.0f);
    const Error e = expect_error([&] {
      const auto wire = rank == 0 ? DataType::bfloat16 : DataType::float32;
      pg->allreduce(Tensor::of(big.data(), big.size()), {.wire_dtype = wire})->wait();
    });
    if (!contains(e.what(), "wire dtype") || !contains(e.what(), "bfloat16 wire")) {
      throw ChildCheckFailed{fmt::format("a wire mismatch not named: {}", e.what())};
    }
  });
}

}  // namespace chorus::test
