// SPDX-License-Identifier: BSD-3-Clause
// Parts of the nccl backend that need no GPU: the type and op mapping table, the error
// translation of CHORUS_NCCL_CHECK / CHORUS_CUDA_CHECK, op descriptions, and the message of
// make_nccl_group on a machine without a CUDA device.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "local_store.hpp"
#include "nccl/nccl_check.hpp"
#include "nccl/nccl_types.hpp"
#include "nccl/nccl_work.hpp"

using namespace chorus;
using namespace std::chrono_literals;

TEST_CASE("every chorus dtype maps to the NCCL type of the same width", "[nccl][types]") {
  const std::map<DataType, ncclDataType_t> expected = {
      {DataType::int8, ncclInt8},       {DataType::uint8, ncclUint8},
      {DataType::int32, ncclInt32},     {DataType::uint32, ncclUint32},
      {DataType::int64, ncclInt64},     {DataType::uint64, ncclUint64},
      {DataType::float16, ncclFloat16}, {DataType::bfloat16, ncclBfloat16},
      {DataType::float32, ncclFloat32}, {DataType::float64, ncclFloat64},
  };
  REQUIRE(expected.size() == static_cast<std::size_t>(kNumDataTypes));
  for (const auto& [dtype, type] : expected) {
    INFO(to_string(dtype));
    const auto mapped = nccl::to_nccl(dtype);
    REQUIRE(mapped.has_value());
    REQUIRE(*mapped == type);
  }
}

TEST_CASE("every reduce op maps on every dtype, avg through ncclAvg", "[nccl][types]") {
  const std::map<ReduceOp, ncclRedOp_t> expected = {
      {ReduceOp::sum, ncclSum}, {ReduceOp::prod, ncclProd}, {ReduceOp::min, ncclMin},
      {ReduceOp::max, ncclMax}, {ReduceOp::avg, ncclAvg},
  };
  REQUIRE(expected.size() == static_cast<std::size_t>(kNumReduceOps));
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto dtype = static_cast<DataType>(d);
    for (const auto& [op, red] : expected) {
      INFO(to_string(dtype) << " " << to_string(op));
      const auto mapped = nccl::to_nccl(op, dtype);
      REQUIRE(mapped.has_value());
      REQUIRE(*mapped == red);
      REQUIRE(nccl::require_nccl_op(op, dtype, "test") == red);
    }
  }
}

TEST_CASE("an unknown dtype or op is rejected with InvalidArgument naming the site",
          "[nccl][types]") {
  const auto bogus_type = static_cast<DataType>(200);
  const auto bogus_op = static_cast<ReduceOp>(200);
  REQUIRE_FALSE(nccl::to_nccl(bogus_type).has_value());
  REQUIRE_FALSE(nccl::to_nccl(bogus_op, DataType::float32).has_value());
  REQUIRE_FALSE(nccl::to_nccl(ReduceOp::sum, bogus_type).has_value());
  try {
    nccl::require_nccl_type(bogus_type, "allreduce (seq 3) on rank 0/1 [world]");
    FAIL("must throw");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("allreduce (seq 3) on rank 0/1 [world]"));
    REQUIRE_THAT(e.what(), Catch::Contains("not supported by this NCCL"));
  }
  REQUIRE_THROWS_AS(nccl::require_nccl_op(bogus_op, DataType::int32, "x"), InvalidArgument);
}

namespace {
ErrorContext sample_context() {
  return ErrorContext{.rank = 2, .size = 4, .group = "dp", .op = "allreduce", .seq = 42};
}
}  // namespace

TEST_CASE("CHORUS_NCCL_CHECK turns a failure into BackendError with NCCL's text and the op",
          "[nccl][check]") {
  // ncclInProgress is not a failure (non-blocking communicators return it).
  REQUIRE_NOTHROW([] { CHORUS_NCCL_CHECK(ncclInProgress, nullptr, sample_context()); }());
  REQUIRE_NOTHROW([] { CHORUS_NCCL_CHECK(ncclSuccess, nullptr, sample_context()); }());
  try {
    CHORUS_NCCL_CHECK(ncclInvalidUsage, nullptr, sample_context());
    FAIL("must throw");
  } catch (const BackendError& e) {
    const std::string what = e.what();
    REQUIRE_THAT(what, Catch::Contains("allreduce (seq 42) on rank 2/4 [dp]"));
    REQUIRE_THAT(what, Catch::Contains(ncclGetErrorString(ncclInvalidUsage)));
    REQUIRE_THAT(what, Catch::Contains("NCCL_DEBUG"));
    REQUIRE(e.context().seq == 42);
    REQUIRE(e.context().op == "allreduce");
    REQUIRE(e.context().rank == 2);
  }
}

TEST_CASE("CHORUS_CUDA_CHECK turns a failure into BackendError with CUDA's name and text",
          "[nccl][check]") {
  REQUIRE_NOTHROW([] { CHORUS_CUDA_CHECK(cudaSuccess, sample_context()); }());
  try {
    CHORUS_CUDA_CHECK(cudaErrorInvalidValue, sample_context());
    FAIL("must throw");
  } catch (const BackendError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("cudaErrorInvalidValue"));
    REQUIRE_THAT(e.what(), Catch::Contains("allreduce (seq 42) on rank 2/4 [dp]"));
    REQUIRE(e.context().seq == 42);
  }
}

TEST_CASE("op descriptions name op, seq, size, dtype, redop and root", "[nccl][check]") {
  nccl::OpInfo info{.name = "reduce",
                    .seq = 7,
                    .bytes = 4 << 20,
                    .dtype = DataType::bfloat16,
                    .op = ReduceOp::max,
                    .peer = 3};
  REQUIRE(nccl::describe(info) == "reduce (seq 7, 4 MiB bfloat16 max, root 3)");
  nccl::OpInfo barrier{.name = "barrier", .seq = 1};
  REQUIRE(nccl::describe(barrier) == "barrier (seq 1)");
  nccl::OpInfo send{.name = "send", .seq = 2, .bytes = 12, .dtype = DataType::int32, .peer = 1};
  REQUIRE(nccl::describe(send) == "send (seq 2, 12 B int32, peer 1)");
}

TEST_CASE("make_nccl_group checks its arguments and, without a GPU, says no CUDA device was found",
          "[nccl][nodevice]") {
  REQUIRE(nccl_available());
  REQUIRE_THROWS_AS(make_nccl_group(nullptr, 0, 1, {}), InvalidArgument);
  int count = 0;
  const bool have_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  if (have_gpu) {
    // The GPU path is covered by test_nccl_gpu; here only the device index check applies.
    auto store = std::make_shared<test::LocalStore>();
    REQUIRE_THROWS_AS(make_nccl_group(store, 0, 1, {.device = count + 5}), InvalidArgument);
    return;
  }
  auto store = std::make_shared<test::LocalStore>();
  try {
    make_nccl_group(store, 0, 1, {.group = {.name = "nogpu"}});
    FAIL("make_nccl_group must throw without a CUDA device");
  } catch (const BackendError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("no CUDA device was found"));
    REQUIRE_THAT(e.what(), Catch::Contains("make_nccl_group on rank 0/1 [nogpu]"));
    REQUIRE_THAT(e.what(), Catch::Contains("tcp backend"));
  }
  REQUIRE(store->num_keys() == 0);  // failed before touching the store
}
