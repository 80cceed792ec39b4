// SPDX-License-Identifier: BSD-3-Clause
// The C ABI in one process: status codes, the thread-local message (the C++ exception's text),
// config versioning, NULL handling, and stores and a one-rank group through the C functions.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

using namespace chorus;

static_assert(CHORUS_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(CHORUS_ERR_TIMEOUT == static_cast<int>(ErrorCode::timeout));
static_assert(CHORUS_ERR_NETWORK == static_cast<int>(ErrorCode::network));
static_assert(CHORUS_ERR_STORE == static_cast<int>(ErrorCode::store));
static_assert(CHORUS_ERR_BACKEND == static_cast<int>(ErrorCode::backend));
static_assert(CHORUS_ERR_ABORTED == static_cast<int>(ErrorCode::aborted));
static_assert(CHORUS_ERR_INTERNAL == static_cast<int>(ErrorCode::internal));
static_assert(CHORUS_FLOAT32 == static_cast<int>(DataType::float32) &&
              CHORUS_FLOAT64 == kNumDataTypes - 1);
static_assert(CHORUS_AVG == static_cast<int>(ReduceOp::avg) && CHORUS_AVG == kNumReduceOps - 1);

namespace {

std::string last_error() { return chorus_get_last_error(); }

// A server-hosting TcpStore on a free loopback port, through the C ABI.
chorus_store_t* make_server_store(int64_t timeout_ms = 5000) {
  chorus_tcp_store_config_t config = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
  config.host = "127.0.0.1";
  config.port = 0;
  config.is_server = 1;
  config.timeout_ms = timeout_ms;
  chorus_store_t* store = nullptr;
  const chorus_result_t rc = chorus_tcp_store_create(&config, &store);
  INFO(last_error());
  REQUIRE(rc == CHORUS_OK);
  REQUIRE(store != nullptr);
  return store;
}

}  // namespace

// chorus_op_type_t mirrors chorus::OpType value by value (collectives.cpp checks only the count
// and one anchor): a renumbered or swapped op fails to compile here.
#define CHORUS_SAME_OP(c_value, cxx_type) \
  static_assert(c_value == static_cast<int>(chorus::OpType::cxx_type), #c_value)
CHORUS_SAME_OP(CHORUS_OP_ALLREDUCE, allreduce);
CHORUS_SAME_OP(CHORUS_OP_ALLGATHER, allgather);
CHORUS_SAME_OP(CHORUS_OP_REDUCE_SCATTER, reduce_scatter);
CHORUS_SAME_OP(CHORUS_OP_BROADCAST, broadcast);
CHORUS_SAME_OP(CHORUS_OP_REDUCE, reduce);
CHORUS_SAME_OP(CHORUS_OP_GATHER, gather);
CHORUS_SAME_OP(CHORUS_OP_SCATTER, scatter);
CHORUS_SAME_OP(CHORUS_OP_ALL_TO_ALL, all_to_all);
CHORUS_SAME_OP(CHORUS_OP_BARRIER, barrier);
CHORUS_SAME_OP(CHORUS_OP_SEND, send);
CHORUS_SAME_OP(CHORUS_OP_RECV, recv);
CHORUS_SAME_OP(CHORUS_OP_ALLGATHERV, allgatherv);
CHORUS_SAME_OP(CHORUS_OP_REDUCE_SCATTERV, reduce_scatterv);
CHORUS_SAME_OP(CHORUS_OP_ALL_TO_ALLV, all_to_allv);
static_assert(CHORUS_OP_TYPE_COUNT == chorus::kNumOpTypes && chorus::kNumOpTypes == 14,
              "an op was added: list it above");
#undef CHORUS_SAME_OP

TEST_CASE("C ABI: version, result strings, dtype sizes", "[capi]") {
  REQUIRE(std::string(chorus_version()) == CHORUS_VERSION_STRING);
  REQUIRE(chorus_version_code() == CHORUS_VERSION_CODE);
  REQUIRE(std::string(chorus_result_string(CHORUS_OK)) == "ok");
  REQUIRE(std::string(chorus_result_string(CHORUS_ERR_TIMEOUT)) == "timeout");
  REQUIRE(std::string(chorus_result_string(static_cast<chorus_result_t>(99))) == "unknown result");
  REQUIRE(chorus_dtype_size(CHORUS_BFLOAT16) == 2);
  REQUIRE(chorus_dtype_size(CHORUS_UINT64) == 8);
  REQUIRE(chorus_dtype_size(static_cast<chorus_dtype_t>(42)) == 0);
}

TEST_CASE("C ABI: NULL arguments and bad configs are INVALID_ARGUMENT, never a crash", "[capi]") {
  REQUIRE(chorus_tcp_store_create(nullptr, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("chorus_tcp_store_create") && Catch::Contains("NULL"));
  int rank = -1;
  REQUIRE(chorus_group_rank(nullptr, &rank) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE(chorus_work_wait(nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE(chorus_store_set(nullptr, "k", "v", 1) == CHORUS_ERR_INVALID_ARGUMENT);
  chorus_work_t* work = nullptr;
  REQUIRE(chorus_barrier(nullptr, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE(work == nullptr);
  // Releasing NULL is a no-op.
  chorus_store_free(nullptr);
  chorus_group_destroy(nullptr);
  chorus_work_free(nullptr);
  chorus_store_server_free(nullptr);
  chorus_free(nullptr);

  chorus_tcp_store_config_t config = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
  chorus_store_t* store = nullptr;
  config.version = 7;  // from a newer header
  REQUIRE(chorus_tcp_store_create(&config, &store) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("version 7") &&
                                 Catch::Contains("CHORUS_TCP_STORE_CONFIG_INITIALIZER"));
  config = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
  config.size = 4;  // not initialized with the macro
  REQUIRE(chorus_tcp_store_create(&config, &store) == CHORUS_ERR_INVALID_ARGUMENT);
  config = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
  config.timeout_ms = -5;
  REQUIRE(chorus_tcp_store_create(&config, &store) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("timeout_ms is -5"));
  REQUIRE(store == nullptr);
}

TEST_CASE("C ABI: shared buffers are allocated, found, and freed once", "[capi]") {
  void* p = nullptr;
  REQUIRE(chorus_shared_buffer_alloc(10'000, &p) == CHORUS_OK);
  REQUIRE(p != nullptr);
  CHECK(static_cast<unsigned char*>(p)[9'999] == 0);
  CHECK(in_shared_buffer(p, 10'000));
  CHECK(chorus_shared_buffer_free(p) == CHORUS_OK);
  CHECK_FALSE(in_shared_buffer(p, 1));
  CHECK(chorus_shared_buffer_free(p) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(chorus_get_last_error()).find("was not returned by") != std::string::npos);
  int on_stack = 0;
  CHECK(chorus_shared_buffer_free(&on_stack) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(chorus_shared_buffer_free(nullptr) == CHORUS_OK);
  void* none = &on_stack;
  CHECK(chorus_shared_buffer_alloc(0, &none) == CHORUS_OK);
  CHECK(none == nullptr);
  CHECK(chorus_shared_buffer_alloc(16, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(chorus_shared_buffer_alloc(SIZE_MAX / 2, &none) == CHORUS_ERR_BACKEND);
  CHECK(std::string(chorus_get_last_error()).find("allocate less") != std::string::npos);
}

TEST_CASE("C ABI: the last error is thread-local", "[capi]") {
  REQUIRE(chorus_group_rank(nullptr, nullptr) == CHORUS_ERR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  std::string other;
  std::thread t([&] {
    other = chorus_get_last_error();  // nothing failed on this thread yet
    (void)chorus_store_set(nullptr, "k", "v", 1);
    other += "|" + std::string(chorus_get_last_error());
  });
  t.join();
  REQUIRE(other.rfind("|", 0) == 0);  // empty before its own failure
  REQUIRE_THAT(other, Catch::Contains("chorus_store_set"));
  REQUIRE(last_error() == mine);
}

TEST_CASE("C ABI: store round trip and a get that times out", "[capi][store]") {
  chorus_store_t* store = make_server_store();
  uint16_t port = 0;
  REQUIRE(chorus_store_port(store, &port) == CHORUS_OK);
  REQUIRE(port != 0);
  REQUIRE(chorus_store_set(store, "greeting", "hello", 5) == CHORUS_OK);
  void* value = nullptr;
  size_t length = 0;
  REQUIRE(chorus_store_get(store, "greeting", 0, &value, &length) == CHORUS_OK);
  REQUIRE(length == 5);
  REQUIRE(std::string(static_cast<const char*>(value)) == "hello");  // NUL-terminated
  chorus_free(value);
  int64_t counter = 0;
  REQUIRE(chorus_store_add(store, "n", 3, &counter) == CHORUS_OK);
  REQUIRE(chorus_store_add(store, "n", 4, &counter) == CHORUS_OK);
  REQUIRE(counter == 7);
  const char* keys[] = {"greeting", "n"};
  int exists = 0;
  REQUIRE(chorus_store_check(store, keys, 2, &exists) == CHORUS_OK);
  REQUIRE(exists == 1);
  REQUIRE(chorus_store_wait(store, keys, 2, 1000) == CHORUS_OK);
  int deleted = 0;
  REQUIRE(chorus_store_delete_key(store, "n", &deleted) == CHORUS_OK);
  REQUIRE(deleted == 1);
  REQUIRE(chorus_store_check(store, keys, 2, &exists) == CHORUS_OK);
  REQUIRE(exists == 0);

  // A missing key: TIMEOUT within the bound, and the message names the key.
  const auto start = Clock::now();
  value = nullptr;
  REQUIRE(chorus_store_get(store, "never-set", 200, &value, &length) == CHORUS_ERR_TIMEOUT);
  REQUIRE(value == nullptr);
  REQUIRE(Clock::now() - start < std::chrono::seconds(5));
  REQUIRE_THAT(last_error(), Catch::Contains("never-set"));
  const char* missing[] = {"never-set"};
  REQUIRE(chorus_store_wait(store, missing, 1, 100) == CHORUS_ERR_TIMEOUT);
  REQUIRE_THAT(last_error(), Catch::Contains("never-set"));
  chorus_store_free(store);
}

TEST_CASE("C ABI: one-rank group; bad rank, bad root and mismatched sizes are status codes",
          "[capi][group]") {
  chorus_store_t* store = make_server_store();
  chorus_tcp_group_config_t config = CHORUS_TCP_GROUP_CONFIG_INITIALIZER;
  config.interface = "127.0.0.1";
  config.timeout_ms = 10000;
  chorus_group_t* group = nullptr;

  // Bad rank: rank 2 of a group of size 2.
  REQUIRE(chorus_group_create_tcp(store, 2, 2, &config, &group) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE(group == nullptr);
  REQUIRE_THAT(last_error(), Catch::Contains("rank 2"));

  chorus_result_t rc = chorus_group_create_tcp(store, 0, 1, &config, &group);
  INFO(last_error());
  REQUIRE(rc == CHORUS_OK);
  chorus_store_free(store);  // the group keeps its own reference
  int rank = -1, size = -1;
  REQUIRE(chorus_group_rank(group, &rank) == CHORUS_OK);
  REQUIRE(chorus_group_size(group, &size) == CHORUS_OK);
  REQUIRE((rank == 0 && size == 1));
  REQUIRE(std::string(chorus_group_backend(group)) == "tcp");

  std::vector<float> a(8, 2.0f), b(8), c(3);
  chorus_tensor_t ta = chorus_cpu_tensor(a.data(), a.size(), CHORUS_FLOAT32);
  chorus_tensor_t tb = chorus_cpu_tensor(b.data(), b.size(), CHORUS_FLOAT32);
  chorus_tensor_t tc = chorus_cpu_tensor(c.data(), c.size(), CHORUS_FLOAT32);
  chorus_work_t* work = nullptr;

  // Mismatched sizes: the C message is exactly the C++ exception's text.
  REQUIRE(chorus_allreduce(group, &ta, &tc, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE(work == nullptr);
  const std::string c_message = last_error();
  REQUIRE_THAT(c_message, Catch::Contains("allreduce") && Catch::Contains("must match"));
  // The same call through C++ on an equivalent group gives the same text.
  {
    auto cpp_store = std::make_shared<TcpStore>(
        TcpStoreOptions{.host = "127.0.0.1", .port = 0, .is_server = true});
    auto pg =
        make_tcp_group(cpp_store, 0, 1,
                       {.group = {.timeout = std::chrono::seconds(10)}, .interface = "127.0.0.1"});
    try {
      pg->allreduce(Tensor::of(a.data(), a.size()), Tensor::of(c.data(), c.size()));
      FAIL("no exception");
    } catch (const InvalidArgument& e) {
      REQUIRE(std::string(e.what()) == c_message);
    }
  }

  // Bad root.
  chorus_op_options_t options = CHORUS_OP_OPTIONS_INITIALIZER;
  options.root = 3;
  REQUIRE(chorus_broadcast(group, &ta, &options, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("root"));
  // Bad enum values from C.
  options = CHORUS_OP_OPTIONS_INITIALIZER;
  options.op = static_cast<chorus_reduce_op_t>(17);
  REQUIRE(chorus_allreduce(group, &ta, &tb, &options, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("options.op is 17"));
  chorus_tensor_t bad = ta;
  bad.dtype = static_cast<chorus_dtype_t>(-1);
  REQUIRE(chorus_allreduce(group, &bad, &bad, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);

  // A count whose byte size overflows size_t (or runs past the address space) is refused
  // before the group sees it; without the check it wraps to a small nbytes().
  chorus_tensor_t huge = chorus_cpu_tensor(a.data(), SIZE_MAX / 4 + 2, CHORUS_FLOAT32);
  REQUIRE(chorus_allreduce(group, &huge, &huge, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("overflows"));
  chorus_tensor_t wraps = chorus_cpu_tensor(a.data(), SIZE_MAX / 4 - 1, CHORUS_FLOAT32);
  REQUIRE(chorus_allreduce(group, &wraps, &wraps, nullptr, &work) == CHORUS_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(last_error(), Catch::Contains("past the end of the address space"));

  // A correct op: out-of-place avg on one rank copies the input.
  options = CHORUS_OP_OPTIONS_INITIALIZER;
  options.op = CHORUS_AVG;
  REQUIRE(chorus_allreduce(group, &ta, &tb, &options, &work) == CHORUS_OK);
  REQUIRE(chorus_work_wait(work) == CHORUS_OK);
  int done = 0;
  REQUIRE(chorus_work_test(work, &done) == CHORUS_OK);
  REQUIRE(done == 1);
  REQUIRE(chorus_work_seq(work) >= 1);
  chorus_work_free(work);
  REQUIRE(b == std::vector<float>(8, 2.0f));

  // Abort: later ops fail with ABORTED and the reason.
  REQUIRE(chorus_group_abort(group, "test over") == CHORUS_OK);
  REQUIRE(chorus_barrier(group, nullptr, &work) == CHORUS_ERR_ABORTED);
  REQUIRE_THAT(last_error(), Catch::Contains("test over"));
  chorus_group_destroy(group);
}

TEST_CASE("C ABI: an nccl group that cannot be made is a BACKEND error, not a crash",
          "[capi][group]") {
  chorus_store_t* store = make_server_store();
  chorus_nccl_group_config_t config = CHORUS_NCCL_GROUP_CONFIG_INITIALIZER;
  config.timeout_ms = 20000;
  chorus_group_t* group = nullptr;
  const chorus_result_t rc = chorus_group_create_nccl(store, 0, 1, &config, &group);
  INFO(last_error());
  if (!nccl_available()) {
    REQUIRE(rc == CHORUS_ERR_BACKEND);
    REQUIRE_THAT(last_error(), Catch::Contains("NCCL"));
  } else if (rc == CHORUS_OK) {  // a GPU is present: the group works through the C ABI
    REQUIRE(std::string(chorus_group_backend(group)) == "nccl");
    chorus_group_destroy(group);
  } else {  // built with NCCL, but no usable GPU here
    REQUIRE(rc == CHORUS_ERR_BACKEND);
    REQUIRE_FALSE(last_error().empty());
    REQUIRE(group == nullptr);
  }
  chorus_store_free(store);
}
