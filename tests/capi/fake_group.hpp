// SPDX-License-Identifier: BSD-3-Clause
// A one-rank ProcessGroup for unit tests of the DDP toolkit: every op completes at once (with
// world size 1, sum and avg are the identity) and is recorded, so tests can check which
// collectives were issued, in what order and with which sizes.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "core/work_state.hpp"

namespace chorus::test {

class LocalGroup final : public ProcessGroup {
 public:
  struct Call {
    std::string name;
    std::size_t count = 0;
    ReduceOp op = ReduceOp::sum;
  };
  LocalGroup()
      : ProcessGroup(0, 1, GroupOptions{.name = "local", .timeout = std::chrono::seconds(5)}) {}
  const char* backend_name() const noexcept override { return "local"; }
  Device device() const noexcept override { return Device::cpu(); }
  void abort(const std::string& reason) override {
    record_failure(std::make_exception_ptr(Error(ErrorCode::aborted, reason)));
  }
  std::shared_ptr<ProcessGroup> split(const std::vector<int>&, GroupOptions) override {
    return nullptr;
  }

  std::vector<Call> calls;

 protected:
  std::shared_ptr<Work> done(const OpCall& c, std::size_t count, ReduceOp op = ReduceOp::sum) {
    calls.push_back({c.name, count, op});
    return WorkState::completed(c.name, c.seq);
  }
  std::shared_ptr<Work> do_allreduce(Tensor in, Tensor out, ReduceOp op, const OpCall& c) override {
    if (!in.same_view(out)) {
      std::memcpy(out.data(), in.data(), in.nbytes());
    }
    return done(c, in.count(), op);
  }
  std::shared_ptr<Work> do_allgather(Tensor in, Tensor, const OpCall& c) override {
    return done(c, in.count());
  }
  std::shared_ptr<Work> do_reduce_scatter(Tensor in, Tensor, ReduceOp op,
                                          const OpCall& c) override {
    return done(c, in.count(), op);
  }
  std::shared_ptr<Work> do_broadcast(Tensor t, int, const OpCall& c) override {
    return done(c, t.count());
  }
  std::shared_ptr<Work> do_reduce(Tensor in, Tensor, ReduceOp op, int, const OpCall& c) override {
    return done(c, in.count(), op);
  }
  std::shared_ptr<Work> do_gather(Tensor in, Tensor, int, const OpCall& c) override {
    return done(c, in.count());
  }
  std::shared_ptr<Work> do_scatter(Tensor in, Tensor, int, const OpCall& c) override {
    return done(c, in.count());
  }
  std::shared_ptr<Work> do_all_to_all(Tensor in, Tensor, const OpCall& c) override {
    return done(c, in.count());
  }
  std::shared_ptr<Work> do_barrier(const OpCall& c) override { return done(c, 0); }
  std::shared_ptr<Work> do_send(Tensor t, int, std::uint32_t, const OpCall& c) override {
    return done(c, t.count());
  }
  std::shared_ptr<Work> do_recv(Tensor t, int, std::uint32_t, const OpCall& c) override {
    return done(c, t.count());
  }
};

}  // namespace chorus::test
