// SPDX-License-Identifier: BSD-3-Clause
// The ProcessGroup base: argument checks happen on the calling rank before the backend is
// called, rejected calls do not consume a sequence number, and a failed group fails fast with
// its original error.
#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "core/work_state.hpp"

using namespace chorus;
using namespace std::chrono_literals;

namespace {

// Records what reached the backend; completes every op at once.
class RecordingGroup final : public ProcessGroup {
 public:
  RecordingGroup(int rank, int size)
      : ProcessGroup(rank, size, GroupOptions{.name = "test", .timeout = 5s}) {}
  const char* backend_name() const noexcept override { return "recording"; }
  Device device() const noexcept override { return Device::cpu(); }
  void abort(const std::string& reason) override {
    record_failure(std::make_exception_ptr(Error(ErrorCode::aborted, reason)));
  }
  void fail_with(std::exception_ptr e) { record_failure(std::move(e)); }
  std::shared_ptr<ProcessGroup> split(const std::vector<int>&, GroupOptions) override {
    return nullptr;
  }

  std::vector<OpCall> calls;

 protected:
  std::shared_ptr<Work> record(const OpCall& call) {
    calls.push_back(call);
    return WorkState::completed(call.name, call.seq);
  }
  std::shared_ptr<Work> do_allreduce(Tensor, Tensor, ReduceOp, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_allgather(Tensor, Tensor, const OpCall& c) override { return record(c); }
  std::shared_ptr<Work> do_reduce_scatter(Tensor, Tensor, ReduceOp, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_broadcast(Tensor, int, const OpCall& c) override { return record(c); }
  std::shared_ptr<Work> do_reduce(Tensor, Tensor, ReduceOp, int, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_gather(Tensor, Tensor, int, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_scatter(Tensor, Tensor, int, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_all_to_all(Tensor, Tensor, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_barrier(const OpCall& c) override { return record(c); }
  std::shared_ptr<Work> do_send(Tensor, int, std::uint32_t, const OpCall& c) override {
    return record(c);
  }
  std::shared_ptr<Work> do_recv(Tensor, int, std::uint32_t, const OpCall& c) override {
    return record(c);
  }
};

}  // namespace

TEST_CASE("wrong arguments throw InvalidArgument before reaching the backend", "[core][args]") {
  RecordingGroup pg(1, 4);
  std::vector<float> a(8), b(8), big(32), small(2);
  std::vector<double> d(8);
  auto ta = Tensor::of(a.data(), a.size());
  auto tb = Tensor::of(b.data(), b.size());

  REQUIRE_THROWS_AS(pg.allreduce(ta, Tensor::of(d.data(), d.size())), InvalidArgument);
  REQUIRE_THROWS_AS(pg.allreduce(ta, Tensor::of(small.data(), small.size())), InvalidArgument);
  REQUIRE_THROWS_AS(pg.allreduce(ta, ta.slice(1, 7).slice(0, 7)), InvalidArgument);  // sizes differ
  REQUIRE_THROWS_AS(pg.allgather(ta, tb), InvalidArgument);  // out too small
  REQUIRE_THROWS_AS(pg.reduce_scatter(ta, tb), InvalidArgument);
  REQUIRE_THROWS_AS(pg.broadcast(ta, {.root = 4}), InvalidArgument);
  REQUIRE_THROWS_AS(pg.broadcast(ta, {.root = -1}), InvalidArgument);
  REQUIRE_THROWS_AS(pg.reduce(ta, tb, {.root = 9}), InvalidArgument);
  REQUIRE_THROWS_AS(pg.all_to_all(Tensor::of(a.data(), 6), Tensor::of(b.data(), 6)),
                    InvalidArgument);
  REQUIRE_THROWS_AS(pg.send(ta, 1), InvalidArgument);  // to self
  REQUIRE_THROWS_AS(pg.recv(ta, 7), InvalidArgument);
  REQUIRE_THROWS_AS(pg.allreduce(Tensor(a.data(), 8, DataType::float32, Device::cuda(0))),
                    InvalidArgument);
  REQUIRE_THROWS_AS(pg.allreduce(ta, {.timeout = 0ms}), InvalidArgument);
  REQUIRE(pg.calls.empty());

  // The message names the op, the rank and what to fix.
  try {
    pg.allgather(ta, tb);
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("allgather on rank 1/4 [test]"));
    REQUIRE_THAT(e.what(), Catch::Contains("size 4 x input"));
  }
}

TEST_CASE("valid calls reach the backend with consecutive sequence numbers", "[core][args]") {
  RecordingGroup pg(1, 4);
  std::vector<float> a(8), big(32);
  auto ta = Tensor::of(a.data(), a.size());
  auto tbig = Tensor::of(big.data(), big.size());
  REQUIRE_THROWS_AS(pg.broadcast(ta, {.root = 7}), InvalidArgument);
  pg.allreduce(ta)->wait();
  pg.allgather(ta, tbig)->wait();
  pg.allgather(tbig.slice(8, 8), tbig)->wait();       // in place: rank 1's block
  pg.reduce_scatter(tbig, tbig.slice(8, 8))->wait();  // in place
  pg.barrier({.timeout = 1s})->wait();
  pg.send(ta, 2, 5)->wait();
  REQUIRE(pg.calls.size() == 6);
  for (std::size_t i = 0; i < 5; ++i) {
    REQUIRE(pg.calls[i].seq == i + 1);
  }
  REQUIRE(pg.calls[4].timeout == 1s);
  REQUIRE(pg.calls[0].timeout == 5s);
  REQUIRE(pg.calls[5].seq == 1);  // p2p has its own numbering
  // On a non-root rank, reduce/gather outputs are ignored and may be empty.
  pg.reduce(ta, Tensor(), {.root = 0})->wait();
  pg.gather(ta, Tensor(), {.root = 0})->wait();
  pg.scatter(Tensor(), ta, {.root = 0})->wait();
}

TEST_CASE("after a failure every call rethrows the original error", "[core][args]") {
  RecordingGroup pg(0, 2);
  std::vector<float> a(4);
  pg.fail_with(
      std::make_exception_ptr(TimeoutError("allreduce (seq 3) timed out waiting for rank 1")));
  pg.abort("later abort does not replace the first error");
  REQUIRE(pg.is_aborted());
  REQUIRE_THROWS_WITH(pg.allreduce(Tensor::of(a.data(), 4)), Catch::Contains("seq 3"));
  REQUIRE_THROWS_AS(pg.barrier(), TimeoutError);
  REQUIRE(pg.calls.empty());
}

TEST_CASE("a group rejects a rank outside [0, size)", "[core][args]") {
  REQUIRE_THROWS_AS(RecordingGroup(4, 4), InvalidArgument);
  REQUIRE_THROWS_AS(RecordingGroup(0, 0), InvalidArgument);
}
