// SPDX-License-Identifier: BSD-3-Clause
// Single-process checks of the tcp backend: world size 1 over an in-process store, and
// InvalidArgument at call time for wrong arguments (nothing is sent).
#include <vector>

#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>
#include <chorus/store.hpp>

namespace chorus {

namespace {
TcpGroupOptions opts() {
  TcpGroupOptions o;
  o.interface = "127.0.0.1";
  o.group.timeout = std::chrono::seconds(10);
  return o;
}
}  // namespace

TEST_CASE("world size 1: every collective is a local copy", "[tcp]") {
  auto pg = make_tcp_group(make_hash_store(), 0, 1, opts());
  CHECK(std::string(pg->backend_name()) == "tcp");
  std::vector<float> in{1, 2, 3};
  std::vector<float> out(3);
  pg->allreduce(Tensor::of(in.data(), 3), Tensor::of(out.data(), 3), {.op = ReduceOp::avg})->wait();
  CHECK(out == in);
  pg->allgather(Tensor::of(in.data(), 3), Tensor::of(out.data(), 3))->wait();
  CHECK(out == in);
  pg->broadcast(Tensor::of(in.data(), 3))->wait();
  pg->barrier()->wait();
  pg->all_to_all(Tensor::of(in.data(), 3), Tensor::of(out.data(), 3))->wait();
  CHECK(out == in);
  pg->allreduce(Tensor::of(in.data(), 0))->wait();
}

TEST_CASE("wrong arguments throw InvalidArgument at call time", "[tcp]") {
  CHECK_THROWS_AS(make_tcp_group(nullptr, 0, 1, opts()), InvalidArgument);
  TcpGroupOptions bad = opts();
  bad.sockets_per_peer = 0;
  CHECK_THROWS_AS(make_tcp_group(make_hash_store(), 0, 1, bad), InvalidArgument);
  bad.sockets_per_peer = 9;
  CHECK_THROWS_AS(make_tcp_group(make_hash_store(), 0, 1, bad), InvalidArgument);
  CHECK_THROWS_AS(make_tcp_group(make_hash_store(), 1, 1, opts()), InvalidArgument);
  // A world that could never fit (a WORLD_SIZE typo) is refused before anything is sized by it
  // or published: the store stays empty.
  auto untouched = make_hash_store();
  CHECK_THROWS_WITH(make_tcp_group(untouched, 0, 2'000'000'000, opts()),
                    Catch::Contains("WORLD_SIZE"));
  CHECK_THROWS_WITH(make_tcp_group(untouched, 0, (1 << 20) + 1, opts()),
                    Catch::Contains("WORLD_SIZE"));
  CHECK(untouched->num_keys() == 0);
  bad = opts();
  bad.hello_timeout = Duration::zero();
  CHECK_THROWS_AS(make_tcp_group(make_hash_store(), 0, 1, bad), InvalidArgument);
  bad = opts();
  bad.local_send_buffer_bytes = -1;
  CHECK_THROWS_WITH(make_tcp_group(make_hash_store(), 0, 1, bad),
                    Catch::Contains("local_send_buffer_bytes"));

  auto pg = make_tcp_group(make_hash_store(), 0, 1, opts());
  std::vector<float> a(4);
  std::vector<float> b(5);
  CHECK_THROWS_AS(pg->allreduce(Tensor::of(a.data(), 4), Tensor::of(b.data(), 5)), InvalidArgument);
  CHECK_THROWS_AS(pg->broadcast(Tensor::of(a.data(), 4), {.root = 1}), InvalidArgument);
  CHECK_THROWS_AS(pg->allreduce(Tensor(a.data(), 4, DataType::float32, Device::cuda(0))),
                  InvalidArgument);
  CHECK_THROWS_AS(pg->allreduce(Tensor(nullptr, 4, DataType::float32)), InvalidArgument);
  CHECK_THROWS_AS(pg->split({}), InvalidArgument);
  CHECK_THROWS_AS(pg->split({0, 0}), InvalidArgument);
  // Nothing was sent and the group is still fine.
  CHECK_FALSE(pg->is_aborted());
  pg->allreduce(Tensor::of(a.data(), 4))->wait();
}

}  // namespace chorus
