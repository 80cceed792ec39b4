// SPDX-License-Identifier: BSD-3-Clause
// A one-rank group for unit tests of the DDP toolkit: every op completes at once (with world
// size 1, sum and avg are the identity) and is recorded, so tests can check which collectives
// were issued, in what order and with which sizes.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "core/backend.hpp"
#include "core/work_state.hpp"

namespace chorus::test {

class LocalBackend final : public detail::Backend {
 public:
  struct Call {
    std::string name;
    std::size_t count = 0;
    ReduceOp op = ReduceOp::sum;
  };
  LocalBackend()
      : Backend(0, 1, GroupOptions{.name = "local", .timeout = std::chrono::seconds(5)}) {}
  const char* backend_name() const noexcept override { return "local"; }
  Device device() const noexcept override { return Device::cpu(); }
  void abort(const std::string& reason) override {
    record_failure(std::make_exception_ptr(Error(ErrorCode::aborted, reason)));
  }
  std::unique_ptr<Backend> split(const std::vector<int>&, GroupOptions) override { return nullptr; }

  std::vector<Call> calls;

 protected:
  std::shared_ptr<Work> start(const OpDescriptor& op, const OpCall& c) override {
    if (op.type == OpType::allreduce && !op.in.same_view(op.out)) {
      std::memcpy(op.out.data(), op.in.data(), op.in.nbytes());
    }
    calls.push_back({c.name, op.in.count(), op.op});
    return WorkState::completed(c.name, c.seq);
  }
};

// The public handle over a new LocalBackend, and the backend (owned by the handle).
inline std::pair<std::shared_ptr<ProcessGroup>, LocalBackend*> make_local_group() {
  auto backend = std::make_unique<LocalBackend>();
  LocalBackend* raw = backend.get();
  return {detail::GroupAccess::wrap(std::move(backend)), raw};
}

}  // namespace chorus::test
