// SPDX-License-Identifier: BSD-3-Clause
// The nccl backend on a real GPU at world size 1 (NCCL refuses two ranks on one GPU): every
// collective on every dtype against expected values, stream ordering, the watchdog aborting a
// stalled op, init timeouts, split, abort and misuse. Skips (exit 77) without a CUDA device.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "local_store.hpp"
#include "nccl/nccl_process_group.hpp"

using namespace chorus;
using namespace std::chrono_literals;

namespace {

#define CUDA_OK(call) REQUIRE((call) == cudaSuccess)

int current_device() {
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  return device;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    CUDA_OK(cudaMalloc(&data_, bytes == 0 ? 1 : bytes));
  }
  ~DeviceBuffer() { (void)cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  Tensor tensor(std::size_t count, DataType dtype) const {
    return Tensor(data_, count, dtype, Device::cuda(current_device()));
  }
  void upload(const std::vector<std::uint8_t>& bytes) const {
    CUDA_OK(cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
  std::vector<std::uint8_t> download(std::size_t bytes) const {
    std::vector<std::uint8_t> out(bytes);
    CUDA_OK(cudaMemcpy(out.data(), data_, bytes, cudaMemcpyDeviceToHost));
    return out;
  }
  void poison() const { CUDA_OK(cudaMemset(data_, 0xAB, bytes_)); }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// Small integers (0..12) encoded in each dtype: exact in float16 and bfloat16 too, and
// different per element, so any misplaced block shows.
std::vector<std::uint8_t> pattern(DataType dtype, std::size_t count, int salt) {
  const std::size_t size = element_size(dtype);
  std::vector<std::uint8_t> bytes(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(salt)) % 13);
    std::uint8_t* p = bytes.data() + i * size;
    switch (dtype) {
      case DataType::int8:
      case DataType::uint8:
        *p = static_cast<std::uint8_t>(v);
        break;
      case DataType::int32:
      case DataType::uint32: {
        const std::uint32_t x = static_cast<std::uint32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::int64:
      case DataType::uint64: {
        const std::uint64_t x = static_cast<std::uint64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::float32: {
        const float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::float64: {
        const double x = static_cast<double>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::bfloat16: {
        const float x = static_cast<float>(v);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &x, 4);
        const std::uint16_t top = static_cast<std::uint16_t>(bits >> 16);  // exact for small ints
        std::memcpy(p, &top, 2);
        break;
      }
      case DataType::float16: {
        // 0 or 2^e * 1.m with e <= 3: sign 0, exponent e + 15, 10-bit mantissa.
        std::uint16_t h = 0;
        if (v != 0) {
          int e = 0;
          while ((v >> (e + 1)) != 0) {
            ++e;
          }
          const int mantissa = (v - (1 << e)) << (10 - e);
          h = static_cast<std::uint16_t>(((e + 15) << 10) | mantissa);
        }
        std::memcpy(p, &h, 2);
        break;
      }
    }
  }
  return bytes;
}

std::shared_ptr<ProcessGroup> make_group(const std::string& name, void* stream = nullptr,
                                         Duration timeout = 60s) {
  auto store = std::make_shared<test::LocalStore>();
  return make_nccl_group(store, 0, 1,
                         {.group = {.name = name, .timeout = timeout}, .stream = stream});
}

nccl::NcclProcessGroup& internals(ProcessGroup& pg) {
  auto* nccl_pg = dynamic_cast<nccl::NcclProcessGroup*>(&detail::GroupAccess::backend(pg));
  REQUIRE(nccl_pg != nullptr);
  return *nccl_pg;
}

// A gate on a CUDA stream: a host function that blocks the stream until release(). State is
// shared with the host function, which may still be returning after the test moved on.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : state_(std::make_shared<State>()) {
    auto* handle = new std::shared_ptr<State>(state_);
    CUDA_OK(cudaLaunchHostFunc(stream, &StreamGate::block, handle));
  }
  ~StreamGate() { release(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void release() {
    {
      std::lock_guard lock(state_->mu);
      state_->open = true;
    }
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };
  static void CUDART_CB block(void* arg) {
    std::unique_ptr<std::shared_ptr<State>> handle(static_cast<std::shared_ptr<State>*>(arg));
    State& state = **handle;
    std::unique_lock lock(state.mu);
    // Bounded so that a failing test can never wedge the CUDA callback thread forever.
    state.cv.wait_for(lock, 120s, [&] { return state.open; });
  }
  std::shared_ptr<State> state_;
};

class Stream {
 public:
  Stream() { CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                ReduceOp::avg};

}  // namespace

TEST_CASE("every collective on every NCCL dtype gives the expected values at world size 1",
          "[nccl][gpu]") {
  auto pg = make_group("all");
  REQUIRE(std::string(pg->backend_name()) == "nccl");
  REQUIRE(pg->device() == Device::cuda(current_device()));
  constexpr std::size_t n = 1003;  // odd: no accidental alignment
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto dtype = static_cast<DataType>(d);
    const std::size_t bytes = n * element_size(dtype);
    const auto input = pattern(dtype, n, d);
    DeviceBuffer a(bytes), b(bytes);
    const Tensor ta = a.tensor(n, dtype), tb = b.tensor(n, dtype);
    auto reset = [&] {
      a.upload(input);
      b.poison();
    };
    auto expect_b = [&](const char* what) {
      INFO(to_string(dtype) << " " << what);
      REQUIRE(b.download(bytes) == input);
    };
    auto expect_a = [&](const char* what) {
      INFO(to_string(dtype) << " " << what << " (in place)");
      REQUIRE(a.download(bytes) == input);
    };

    for (ReduceOp op : kAllOps) {
      reset();
      pg->allreduce(ta, tb, {.op = op})->synchronize();
      expect_b(to_string(op));
      reset();
      pg->allreduce(ta, {.op = op})->synchronize();
      expect_a(to_string(op));

      reset();
      pg->reduce_scatter(ta, tb, {.op = op})->synchronize();
      expect_b("reduce_scatter");
      reset();
      pg->reduce(ta, tb, {.op = op, .root = 0})->synchronize();
      expect_b("reduce");
    }
    reset();
    pg->reduce_scatter(ta, ta)->synchronize();
    expect_a("reduce_scatter");
    reset();
    pg->reduce(ta, ta)->synchronize();
    expect_a("reduce");

    reset();
    pg->allgather(ta, tb)->synchronize();
    expect_b("allgather");
    reset();
    pg->allgather(ta, ta)->synchronize();
    expect_a("allgather");

    reset();
    pg->broadcast(ta, {.root = 0})->synchronize();
    expect_a("broadcast");

    reset();
    pg->gather(ta, tb, {.root = 0})->synchronize();
    expect_b("gather");
    reset();
    pg->gather(ta, ta)->synchronize();
    expect_a("gather");

    reset();
    pg->scatter(ta, tb, {.root = 0})->synchronize();
    expect_b("scatter");
    reset();
    pg->scatter(ta, ta)->synchronize();
    expect_a("scatter");

    reset();
    pg->all_to_all(ta, tb)->synchronize();
    expect_b("all_to_all");
    reset();
    pg->all_to_all(ta, ta)->synchronize();
    expect_a("all_to_all");
  }
  auto barrier = pg->barrier();
  barrier->synchronize();
  REQUIRE(barrier->is_completed());
  REQUIRE(barrier->is_success());
  REQUIRE(std::string(barrier->op_name()) == "barrier");

  // Empty tensors are valid no-ops; they still complete through the stream.
  pg->allreduce(Tensor(nullptr, 0, DataType::float32, Device::cuda(current_device())))
      ->synchronize();
  REQUIRE_FALSE(pg->is_aborted());
}

TEST_CASE("sequence numbers, then() callbacks and wait_for on NCCL Works", "[nccl][gpu]") {
  auto pg = make_group("work");
  DeviceBuffer a(4096);
  const Tensor t = a.tensor(1024, DataType::float32);
  auto first = pg->allreduce(t);
  auto second = pg->allreduce(t);
  REQUIRE(second->seq() == first->seq() + 1);
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  second->then([&](Work& w) {
    std::lock_guard lock(mu);
    called = w.is_success();
    cv.notify_all();
  });
  REQUIRE(second->wait_for(30s));  // the watchdog completes it without synchronize()
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return called; }));
  }
  REQUIRE(first->wait_for(30s));
  REQUIRE(first->is_success());
  REQUIRE(first->exception() == nullptr);
}

TEST_CASE("ops wait for the caller's stream, and wait() makes the caller's stream wait",
          "[nccl][gpu][stream]") {
  Stream caller;
  auto pg = make_group("stream", caller.get());
  constexpr std::size_t n = 4 << 20;  // 16 MiB of float32
  const auto input = pattern(DataType::float32, n, 5);
  DeviceBuffer in(n * 4), out(n * 4);
  CUDA_OK(cudaMemset(in.data(), 0, n * 4));
  out.poison();
  void* host_in = nullptr;
  void* host_out = nullptr;
  CUDA_OK(cudaMallocHost(&host_in, n * 4));
  CUDA_OK(cudaMallocHost(&host_out, n * 4));
  std::memcpy(host_in, input.data(), n * 4);
  std::memset(host_out, 0, n * 4);
  // Warm up (module loading must not happen while the stream is stalled).
  pg->allreduce(in.tensor(n, DataType::float32), out.tensor(n, DataType::float32))->synchronize();
  out.poison();
  {
    // Input arrives on the caller's stream behind a closed gate: an op that did not wait for
    // the caller's stream would reduce the zeros already in `in`.
    StreamGate gate(caller.get());
    CUDA_OK(cudaMemcpyAsync(in.data(), host_in, n * 4, cudaMemcpyHostToDevice, caller.get()));
    auto work = pg->allreduce(in.tensor(n, DataType::float32), out.tensor(n, DataType::float32));
    work->wait();  // no host block: only the caller's stream waits
    CUDA_OK(cudaMemcpyAsync(host_out, out.data(), n * 4, cudaMemcpyDeviceToHost, caller.get()));
    REQUIRE_FALSE(work->is_completed());  // cannot have run: the gate is still closed
    gate.release();
    CUDA_OK(cudaStreamSynchronize(caller.get()));
    work->synchronize();
    REQUIRE(work->is_success());
  }
  REQUIRE(std::memcmp(host_out, input.data(), n * 4) == 0);
  (void)cudaFreeHost(host_in);
  (void)cudaFreeHost(host_out);
}

TEST_CASE(
    "the watchdog times out a stalled op, aborts the communicator, and later calls fail "
    "fast",
    "[nccl][gpu][watchdog]") {
  Stream caller;
  auto pg = make_group("stall", caller.get());
  auto& internal = internals(*pg);
  DeviceBuffer a(4096);
  const Tensor t = a.tensor(1024, DataType::float32);
  // Healthy first, which also loads the kernels of both ops: module loading must not happen
  // while the stream is stalled.
  pg->allreduce(t)->synchronize();
  pg->broadcast(t)->synchronize();

  StreamGate gate(caller.get());  // nothing queued after this on the caller's stream can run
  const auto timeout = 500ms;
  const auto started = std::chrono::steady_clock::now();
  auto stalled = pg->allreduce(t, {.timeout = timeout});
  auto behind = pg->broadcast(t);  // default timeout (60 s): fails with the group
  std::uint64_t stalled_seq = stalled->seq();
  try {
    stalled->synchronize();
    FAIL("a stalled op must time out");
  } catch (const TimeoutError& e) {
    const auto elapsed = std::chrono::steady_clock::now() - started;
    REQUIRE(elapsed < timeout + 20s);  // upper bound only: the watchdog polls every ms
    const std::string what = e.what();
    INFO(what);
    REQUIRE_THAT(what, Catch::Contains("allreduce (seq " + std::to_string(stalled_seq)));
    REQUIRE_THAT(what, Catch::Contains("timed out after 500 ms"));
    REQUIRE_THAT(what, Catch::Contains("on rank 0/1 [stall]"));
    REQUIRE_THAT(what, Catch::Contains("aborted"));
    REQUIRE(e.context().seq == stalled_seq);
    REQUIRE(e.context().op == "allreduce");
    REQUIRE(e.context().timeout == timeout);
    REQUIRE(e.context().elapsed >= timeout);
  }
  REQUIRE(stalled->is_completed());
  REQUIRE_FALSE(stalled->is_success());
  // The op queued behind fails too, naming itself, its age and the root cause.
  REQUIRE(behind->wait_for(10s));
  try {
    behind->synchronize();
    FAIL("the op behind the stalled one must fail with the group");
  } catch (const TimeoutError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("broadcast (seq " + std::to_string(behind->seq())));
    REQUIRE_THAT(e.what(), Catch::Contains("was pending for"));
    REQUIRE(e.context().seq == behind->seq());
  }
  REQUIRE(pg->is_aborted());
  REQUIRE(pg->failure() != nullptr);

  // Later calls rethrow the original error at once, without touching the GPU.
  const auto fast = std::chrono::steady_clock::now();
  try {
    pg->allreduce(t);
    FAIL("a call on an aborted group must throw");
  } catch (const TimeoutError& e) {
    REQUIRE(e.context().seq == stalled_seq);
  }
  REQUIRE_THROWS_AS(pg->barrier(), TimeoutError);
  REQUIRE(std::chrono::steady_clock::now() - fast < timeout);

  gate.release();
  REQUIRE(internal.wait_comm_aborted(60s));  // the communicator was aborted
  REQUIRE_THROWS_AS(pg->split({0}), TimeoutError);
}

TEST_CASE("abort() fails pending and later ops with the application's reason",
          "[nccl][gpu][abort]") {
  Stream caller;
  auto pg = make_group("abort", caller.get());
  DeviceBuffer a(4096);
  const Tensor t = a.tensor(1024, DataType::float32);
  pg->allreduce(t)->synchronize();  // loads the kernel before the stream stalls
  StreamGate gate(caller.get());
  auto pending = pg->allreduce(t);
  pg->abort("test says stop");
  REQUIRE(pending->wait_for(10s));
  try {
    pending->synchronize();
    FAIL("must throw");
  } catch (const Error& e) {
    REQUIRE(e.code() == ErrorCode::aborted);
    REQUIRE_THAT(e.what(), Catch::Contains("test says stop"));
  }
  try {
    pg->allreduce(t);
    FAIL("must throw");
  } catch (const Error& e) {
    REQUIRE(e.code() == ErrorCode::aborted);
  }
  pg->abort("again");  // idempotent; the first reason stays
  gate.release();
  REQUIRE(internals(*pg).wait_comm_aborted(60s));
}

TEST_CASE("misuse is InvalidArgument at call time and leaves the group usable",
          "[nccl][gpu][args]") {
  auto pg = make_group("misuse");
  const int device = current_device();
  DeviceBuffer a(4096), b(4096);
  const Tensor ta = a.tensor(1024, DataType::float32);

  std::vector<float> host(1024);
  try {
    pg->allreduce(Tensor::of(host.data(), host.size()));
    FAIL("a CPU tensor must be rejected");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("CPU tensor"));
    REQUIRE_THAT(e.what(), Catch::Contains("allreduce on rank 0/1 [misuse]"));
  }
  // Labeled with another device.
  REQUIRE_THROWS_AS(
      pg->allreduce(Tensor(a.data(), 1024, DataType::float32, Device::cuda(device + 1))),
      InvalidArgument);
  // Labeled as this device but host memory.
  try {
    pg->allreduce(Tensor(host.data(), host.size(), DataType::float32, Device::cuda(device)));
    FAIL("host memory labeled cuda must be rejected");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("host memory"));
  }
  // Sizes that do not match.
  REQUIRE_THROWS_AS(pg->allreduce(ta, b.tensor(512, DataType::float32)), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allreduce(ta, b.tensor(1024, DataType::int32)), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allgather(ta, b.tensor(512, DataType::float32)), InvalidArgument);
  REQUIRE_THROWS_AS(pg->broadcast(ta, {.root = 1}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->send(ta, 0), InvalidArgument);  // to self
  REQUIRE_THROWS_AS(pg->recv(ta, 1), InvalidArgument);
  REQUIRE_THROWS_AS(pg->split({1}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->split({}), InvalidArgument);

  // Nothing above consumed a sequence number or hurt the group.
  auto work = pg->allreduce(ta);
  REQUIRE(work->seq() == 1);
  work->synchronize();
  REQUIRE_FALSE(pg->is_aborted());

  auto store = std::make_shared<test::LocalStore>();
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  REQUIRE_THROWS_AS(make_nccl_group(store, 0, 1, {.device = count}), InvalidArgument);
  REQUIRE_THROWS_AS(make_nccl_group(store, 1, 1, {}), InvalidArgument);
}

TEST_CASE("split maps to ncclCommSplit and the subgroup works", "[nccl][gpu][split]") {
  auto pg = make_group("parent");
  // Parent traffic before the split, so the child's sequence numbers are visibly its own.
  pg->barrier()->synchronize();
  pg->barrier()->synchronize();
  auto child = pg->split({0}, {.name = "child"});
  REQUIRE(child != nullptr);
  REQUIRE(child.get() != pg.get());
  CHECK(child->rank() == 0);
  CHECK(child->size() == 1);
  CHECK(child->name() == "child");
  CHECK(std::string(child->backend_name()) == "nccl");
  CHECK(child->device() == pg->device());
  CHECK(pg->rank() == 0);  // the parent is unchanged
  CHECK(pg->size() == 1);

  // Out of place into a poisoned buffer: the expected values can only get there if the
  // child's communicator really ran the op (a sum over one rank is that rank's input).
  constexpr std::size_t n = 1024;
  DeviceBuffer in(n * 4);
  DeviceBuffer out(n * 4);
  const auto input = pattern(DataType::int32, n, 3);
  in.upload(input);
  out.poison();
  auto work = child->allreduce(in.tensor(n, DataType::int32), out.tensor(n, DataType::int32));
  CHECK(work->seq() == 1);  // the child counts its own ops from 1
  work->synchronize();
  REQUIRE(work->is_success());
  REQUIRE(out.download(n * 4) == input);
  REQUIRE(in.download(n * 4) == input);

  // Both groups stay usable, independently.
  out.poison();
  child->broadcast(in.tensor(n, DataType::int32))->synchronize();
  pg->allgather(in.tensor(n, DataType::int32), out.tensor(n, DataType::int32))->synchronize();
  REQUIRE(out.download(n * 4) == input);
  CHECK(pg->barrier()->seq() == 4);

  auto unnamed = pg->split({0});
  REQUIRE(unnamed != nullptr);
  CHECK(unnamed->name() == "parent/split");
  // A non-member gets nullptr: that needs two ranks, so two GPUs (NCCL refuses two ranks on
  // one device); see nccl_gpu_multi_test.cpp.
}

TEST_CASE("communicator init times out naming the missing rank instead of hanging",
          "[nccl][gpu][init]") {
  SECTION("rank 1 never joins") {
    auto store = std::make_shared<test::LocalStore>();
    const auto started = std::chrono::steady_clock::now();
    try {
      make_nccl_group(store, 0, 2, {.group = {.name = "lonely0", .timeout = 3s}});
      FAIL("init with a missing rank must time out");
    } catch (const TimeoutError& e) {
      INFO(e.what());
      REQUIRE_THAT(e.what(), Catch::Contains("rank(s) 1 never joined"));
      REQUIRE(e.context().peers == std::vector<int>{1});
      REQUIRE(std::chrono::steady_clock::now() - started < 3s + 30s);
    }
  }
  SECTION("rank 0 never publishes the unique id") {
    auto store = std::make_shared<test::LocalStore>();
    try {
      make_nccl_group(store, 1, 2, {.group = {.name = "lonely1", .timeout = 1s}});
      FAIL("init without rank 0 must time out");
    } catch (const TimeoutError& e) {
      INFO(e.what());
      REQUIRE_THAT(e.what(), Catch::Contains("rank 0 did not publish the NCCL unique id"));
      REQUIRE(e.context().peers == std::vector<int>{0});
    }
  }
}

TEST_CASE("several groups on one store get separate communicators", "[nccl][gpu][init]") {
  auto store = std::make_shared<test::LocalStore>();
  auto g1 = make_nccl_group(store, 0, 1, {.group = {.name = "same"}});
  auto g2 = make_nccl_group(store, 0, 1, {.group = {.name = "same"}});
  DeviceBuffer a(64);
  g1->allreduce(a.tensor(16, DataType::float32))->synchronize();
  g2->allreduce(a.tensor(16, DataType::float32))->synchronize();
}
