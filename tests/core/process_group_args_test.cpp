// SPDX-License-Identifier: BSD-3-Clause
// The ProcessGroup base: argument checks happen on the calling rank before the backend is
// called, rejected calls do not consume a sequence number, and a failed group fails fast with
// its original error.
#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "core/backend.hpp"
#include "core/work_state.hpp"

using namespace chorus;
using namespace std::chrono_literals;

namespace {

// Records what reached the backend; completes every op at once.
class RecordingBackend final : public detail::Backend {
 public:
  RecordingBackend(int rank, int size)
      : Backend(rank, size, GroupOptions{.name = "test", .timeout = 5s}) {}
  const char* backend_name() const noexcept override { return "recording"; }
  Device device() const noexcept override { return Device::cpu(); }
  void abort(const std::string& reason) override {
    record_failure(std::make_exception_ptr(Error(ErrorCode::aborted, reason)));
  }
  void fail_with(std::exception_ptr e) { record_failure(std::move(e)); }
  std::unique_ptr<Backend> split(const std::vector<int>&, GroupOptions) override { return nullptr; }

  std::vector<OpCall> calls;
  std::vector<OpDescriptor> ops;

 protected:
  std::shared_ptr<Work> start(const OpDescriptor& op, const OpCall& call) override {
    calls.push_back(call);
    ops.push_back(op);
    return WorkState::completed(call.name, call.seq);
  }
};

// A public handle over a RecordingBackend, which the handle owns.
struct RecordingGroup {
  RecordingGroup(int rank, int size) {
    auto owned = std::make_unique<RecordingBackend>(rank, size);
    backend = owned.get();
    group = detail::GroupAccess::wrap(std::move(owned));
  }
  ProcessGroup* operator->() const { return group.get(); }

  std::shared_ptr<ProcessGroup> group;
  RecordingBackend* backend = nullptr;
};

}  // namespace

TEST_CASE("wrong arguments throw InvalidArgument before reaching the backend", "[core][args]") {
  RecordingGroup pg(1, 4);
  std::vector<float> a(8), b(8), big(32), small(2);
  std::vector<double> d(8);
  auto ta = Tensor::of(a.data(), a.size());
  auto tb = Tensor::of(b.data(), b.size());

  REQUIRE_THROWS_AS(pg->allreduce(ta, Tensor::of(d.data(), d.size())), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allreduce(ta, Tensor::of(small.data(), small.size())), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allreduce(ta, ta.slice(1, 7).slice(0, 7)),
                    InvalidArgument);                         // sizes differ
  REQUIRE_THROWS_AS(pg->allgather(ta, tb), InvalidArgument);  // out too small
  REQUIRE_THROWS_AS(pg->reduce_scatter(ta, tb), InvalidArgument);
  REQUIRE_THROWS_AS(pg->broadcast(ta, {.root = 4}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->broadcast(ta, {.root = -1}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->reduce(ta, tb, {.root = 9}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->all_to_all(Tensor::of(a.data(), 6), Tensor::of(b.data(), 6)),
                    InvalidArgument);
  REQUIRE_THROWS_AS(pg->send(ta, 1), InvalidArgument);  // to self
  REQUIRE_THROWS_AS(pg->recv(ta, 7), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allreduce(Tensor(a.data(), 8, DataType::float32, Device::cuda(0))),
                    InvalidArgument);
  REQUIRE_THROWS_AS(pg->allreduce(ta, {.timeout = 0ms}), InvalidArgument);
  REQUIRE(pg.backend->calls.empty());

  // The message names the op, the rank and what to fix.
  try {
    pg->allgather(ta, tb);
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
  REQUIRE_THROWS_AS(pg->broadcast(ta, {.root = 7}), InvalidArgument);
  pg->allreduce(ta)->wait();
  pg->allgather(ta, tbig)->wait();
  pg->allgather(tbig.slice(8, 8), tbig)->wait();       // in place: rank 1's block
  pg->reduce_scatter(tbig, tbig.slice(8, 8))->wait();  // in place
  pg->barrier({.timeout = 1s})->wait();
  pg->send(ta, 2, 5)->wait();
  REQUIRE(pg.backend->calls.size() == 6);
  for (std::size_t i = 0; i < 5; ++i) {
    REQUIRE(pg.backend->calls[i].seq == i + 1);
  }
  REQUIRE(pg.backend->calls[4].timeout == 1s);
  REQUIRE(pg.backend->calls[0].timeout == 5s);
  REQUIRE(pg.backend->calls[5].seq == 1);  // p2p has its own numbering
  // On a non-root rank, reduce/gather outputs are ignored and may be empty.
  pg->reduce(ta, Tensor(), {.root = 0})->wait();
  pg->gather(ta, Tensor(), {.root = 0})->wait();
  pg->scatter(Tensor(), ta, {.root = 0})->wait();
}

TEST_CASE("after a failure every call rethrows the original error", "[core][args]") {
  RecordingGroup pg(0, 2);
  std::vector<float> a(4);
  pg.backend->fail_with(
      std::make_exception_ptr(TimeoutError("allreduce (seq 3) timed out waiting for rank 1")));
  pg->abort("later abort does not replace the first error");
  REQUIRE(pg->is_aborted());
  REQUIRE_THROWS_WITH(pg->allreduce(Tensor::of(a.data(), 4)), Catch::Contains("seq 3"));
  REQUIRE_THROWS_AS(pg->barrier(), TimeoutError);
  REQUIRE(pg.backend->calls.empty());
}

TEST_CASE("a group rejects a rank outside [0, size)", "[core][args]") {
  REQUIRE_THROWS_AS(RecordingGroup(4, 4), InvalidArgument);
  REQUIRE_THROWS_AS(RecordingGroup(0, 0), InvalidArgument);
}

TEST_CASE("the variable-size collectives' shape rules", "[core][args]") {
  RecordingGroup pg(1, 3);
  std::vector<float> in(6), out(9);
  auto tin = Tensor::of(in.data(), in.size());
  auto tout = Tensor::of(out.data(), out.size());
  // allgatherv: input = counts[rank], output = sum of counts.
  pg->allgatherv(tin.slice(0, 4), tout, {2, 4, 3})->wait();
  pg->allgatherv(tout.slice(2, 4), tout, {2, 4, 3})->wait();  // in place: rank 1's block
  REQUIRE_THROWS_AS(pg->allgatherv(tin.slice(0, 3), tout, {2, 4, 3}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allgatherv(tin.slice(0, 4), tout, {2, 4}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->allgatherv(tout.slice(0, 4), tout, {2, 4, 3}), InvalidArgument);
  // reduce_scatterv: output = counts[rank], input = sum of counts.
  pg->reduce_scatterv(tout, tin.slice(0, 4), {2, 4, 3})->wait();
  pg->reduce_scatterv(tout, tout.slice(2, 4), {2, 4, 3})->wait();  // in place
  REQUIRE_THROWS_AS(pg->reduce_scatterv(tout, tin.slice(0, 2), {2, 4, 3}), InvalidArgument);
  // all_to_allv: input = sum of in_counts, output = sum of out_counts, out-of-place.
  pg->all_to_allv(tin, tout, {1, 2, 3}, {3, 3, 3})->wait();
  REQUIRE_THROWS_AS(pg->all_to_allv(tin, tout, {1, 2, 2}, {3, 3, 3}), InvalidArgument);
  REQUIRE_THROWS_AS(pg->all_to_allv(tout.slice(0, 6), tout.slice(3, 6), {2, 2, 2}, {2, 2, 2}),
                    InvalidArgument);
  REQUIRE(pg.backend->calls.size() == 5);
  REQUIRE(pg.backend->ops[4].in_counts == std::vector<std::size_t>{1, 2, 3});
  try {
    pg->allgatherv(tin.slice(0, 3), tout, {2, 4, 3});
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("allgatherv on rank 1/3 [test]"));
  }
}

TEST_CASE("run() takes a descriptor; an unknown op type is rejected", "[core][args]") {
  RecordingGroup pg(0, 2);
  std::vector<std::int32_t> a(4);
  OpDescriptor op;
  op.type = OpType::allreduce;
  op.in = op.out = Tensor::of(a.data(), a.size());
  op.op = ReduceOp::max;
  pg->run(op)->wait();
  REQUIRE(pg.backend->calls.back().name == std::string("allreduce"));
  REQUIRE(pg.backend->ops.back().op == ReduceOp::max);
  op.type = static_cast<OpType>(kNumOpTypes);
  REQUIRE_THROWS_AS(pg->run(op), InvalidArgument);
  REQUIRE(to_string(OpType::all_to_allv) == std::string("all_to_allv"));
}

TEST_CASE("coalesced descriptors: the rule table checks the list and every pair", "[core][args]") {
  RecordingGroup pg(1, 2);
  std::vector<float> a(16), b(16), c(16);
  std::vector<double> d(4);
  const Tensor ta = Tensor::of(a.data(), a.size());
  const Tensor tb = Tensor::of(b.data(), b.size());
  const Tensor tc = Tensor::of(c.data(), c.size());
  auto allreduce = [](std::vector<Tensor> ins, std::vector<Tensor> outs) {
    OpDescriptor op{.type = OpType::allreduce, .op = ReduceOp::max};
    op.ins = std::move(ins);
    op.outs = std::move(outs);
    return op;
  };
  auto rejects = [&](OpDescriptor op, const char* why) {
    INFO(why);
    REQUIRE_THROWS_AS(pg->run(op), InvalidArgument);
  };
  // Valid: out of place, in place, sizes differing, an empty pair; one op, one seq.
  pg->run(allreduce({ta.slice(0, 3), ta.slice(3, 0), ta.slice(3, 13)},
                    {tb.slice(0, 3), tb.slice(3, 0), tb.slice(3, 13)}));
  pg->run(allreduce({ta.slice(0, 5), ta.slice(5, 11)}, {ta.slice(0, 5), tc.slice(0, 11)}));
  OpDescriptor gather{.type = OpType::allgather};
  gather.ins = {ta.slice(0, 2), ta.slice(2, 3)};
  gather.outs = {tb.slice(0, 4), tb.slice(4, 6)};
  pg->run(gather);
  gather.ins = {tb.slice(2, 2)};  // in place: rank 1's block of its output
  gather.outs = {tb.slice(0, 4)};
  pg->run(gather);
  OpDescriptor scatter{.type = OpType::reduce_scatter, .op = ReduceOp::sum};
  scatter.ins = {ta.slice(0, 4), ta.slice(4, 2)};
  scatter.outs = {tb.slice(0, 2), tb.slice(2, 1)};
  pg->run(scatter);
  REQUIRE(pg.backend->calls.size() == 5);
  CHECK(pg.backend->calls[4].seq == 5);
  CHECK(pg.backend->ops[0].ins.size() == 3);

  rejects(allreduce({ta.slice(0, 3)}, {}), "ins and outs differ in number");
  rejects(allreduce({ta.slice(0, 3), ta.slice(3, 3)}, {tb.slice(0, 3)}), "one output missing");
  rejects(allreduce({}, {tb.slice(0, 3)}), "no input at all");
  rejects(allreduce({ta.slice(0, 3)}, {tb.slice(0, 4)}), "a pair's counts differ");
  rejects(allreduce({ta.slice(0, 2), Tensor::of(d.data(), 2)},
                    {tb.slice(0, 2), Tensor::of(d.data() + 2, 2)}),
          "two dtypes in one op");
  rejects(allreduce({ta.slice(0, 3), ta.slice(3, 3)}, {tb.slice(0, 3), tb.slice(2, 3)}),
          "two outputs overlap");
  rejects(allreduce({ta.slice(0, 3), ta.slice(3, 3)}, {tb.slice(0, 3), ta.slice(1, 3)}),
          "an input overlaps another pair's output");
  rejects(allreduce({ta.slice(0, 3)}, {ta.slice(1, 3)}), "a pair overlaps without being in place");
  rejects(allreduce({Tensor(a.data(), 2, DataType::float32, Device::cuda(0))}, {tb.slice(0, 2)}),
          "a tensor on another device");
  OpDescriptor with_in = allreduce({ta.slice(0, 3)}, {tb.slice(0, 3)});
  with_in.in = tc;
  with_in.out = tc;
  rejects(with_in, "in/out set beside ins/outs");
  gather.ins = {ta.slice(0, 2)};
  gather.outs = {tb.slice(0, 3)};
  rejects(gather, "allgather: an output not size x its input");
  OpDescriptor bcast{.type = OpType::broadcast};
  bcast.ins = {ta};
  bcast.outs = {ta};
  REQUIRE_THROWS_WITH(pg->run(bcast), Catch::Contains("are for allreduce, allgather and "
                                                      "reduce_scatter"));
  // The message names the pair.
  REQUIRE_THROWS_WITH(
      pg->run(allreduce({ta.slice(0, 3), ta.slice(3, 3)}, {tb.slice(0, 3), tb.slice(3, 4)})),
      Catch::Contains("tensor 1: output (4 x float32) must match input"));
  // None of the rejected calls took a sequence number.
  pg->barrier();
  CHECK(pg.backend->calls.back().seq == 6);
}
