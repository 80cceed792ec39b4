// SPDX-License-Identifier: BSD-3-Clause
// DataType/ReduceOp names and sizes, Tensor views, Deadline arithmetic, error hierarchy.
#include <catch2/catch.hpp>

#include <thread>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

using namespace chorus;
using namespace std::chrono_literals;

TEST_CASE("every DataType has a name, a size and round-trips through parse", "[core]") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    REQUIRE(std::string(to_string(dtype)) != "?");
    REQUIRE(parse_data_type(to_string(dtype)) == dtype);
    const auto size = element_size(dtype);
    REQUIRE((size == 1 || size == 2 || size == 4 || size == 8));
  }
  REQUIRE(parse_data_type("half") == DataType::float16);
  REQUIRE(parse_data_type("bf16") == DataType::bfloat16);
  REQUIRE(parse_data_type("float") == DataType::float32);
  REQUIRE_FALSE(parse_data_type("complex64").has_value());
  for (int i = 0; i < kNumReduceOps; ++i) {
    REQUIRE(parse_reduce_op(to_string(static_cast<ReduceOp>(i))) == static_cast<ReduceOp>(i));
  }
}

TEST_CASE("Tensor views slice, compare and detect overlap", "[core]") {
  std::vector<float> data(10);
  const auto t = Tensor::of(data.data(), data.size());
  REQUIRE(t.dtype() == DataType::float32);
  REQUIRE(t.nbytes() == 40);
  const auto s = t.slice(2, 3);
  REQUIRE(s.data() == data.data() + 2);
  REQUIRE(s.count() == 3);
  REQUIRE(s.overlaps(t));
  REQUIRE_FALSE(t.slice(0, 2).overlaps(t.slice(2, 2)));
  REQUIRE(t.same_view(Tensor::of(data.data(), 10)));
  REQUIRE_THROWS_AS(t.slice(8, 3), InvalidArgument);
  REQUIRE(t.slice(10, 0).count() == 0);
}

TEST_CASE("Deadline saturates, names forever and counts down", "[core]") {
  REQUIRE(Deadline::never().is_never());
  REQUIRE_FALSE(Deadline::never().expired());
  REQUIRE(Deadline::after(Duration::max()).is_never());
  REQUIRE(Deadline::after(0ms).expired());
  const auto d = Deadline::after(10min);
  REQUIRE_FALSE(d.expired());
  REQUIRE(d.remaining() <= 10min);
  REQUIRE(d.remaining() > 9min);
  REQUIRE(earliest(d, Deadline::never()).when() == d.when());
}

TEST_CASE("errors carry their code, context and subclass", "[core]") {
  ErrorContext ctx;
  ctx.rank = 2;
  ctx.op = "allreduce";
  ctx.peers = {3};
  try {
    throw_error(ErrorCode::timeout, "allreduce timed out", ctx);
  } catch (const TimeoutError& e) {
    REQUIRE(e.code() == ErrorCode::timeout);
    REQUIRE(e.context().rank == 2);
    REQUIRE(e.context().peers == std::vector<int>{3});
    REQUIRE(std::string(e.what()) == "allreduce timed out");
  }
  REQUIRE_THROWS_AS(throw_error(ErrorCode::network, "x"), NetworkError);
  REQUIRE_THROWS_AS(throw_error(ErrorCode::store, "x"), StoreError);
  REQUIRE_THROWS_AS(throw_error(ErrorCode::backend, "x"), BackendError);
  REQUIRE_THROWS_AS(throw_error(ErrorCode::invalid_argument, "x"), InvalidArgument);
  REQUIRE_THROWS_AS(throw_error(ErrorCode::aborted, "x"), Error);
}
