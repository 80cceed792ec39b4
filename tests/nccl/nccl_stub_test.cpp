// SPDX-License-Identifier: BSD-3-Clause
// The stub built when CUDA or NCCL is missing says so clearly (this binary compiles
// src/nccl/nccl_stub.cpp directly, so it runs in every build).
#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

using namespace chorus;

TEST_CASE("a build without NCCL says so and names the way out", "[nccl][stub]") {
  REQUIRE_FALSE(nccl_available());
  try {
    make_nccl_group(nullptr, 0, 1, {});
    FAIL("make_nccl_group must throw in a build without NCCL");
  } catch (const BackendError& e) {
    REQUIRE(e.code() == ErrorCode::backend);
    REQUIRE_THAT(e.what(), Catch::Contains("built without NCCL"));
    REQUIRE_THAT(e.what(), Catch::Contains("-Dnccl=enabled"));
    REQUIRE_THAT(e.what(), Catch::Contains("tcp backend"));
  }
}
