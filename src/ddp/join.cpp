// SPDX-License-Identifier: BSD-3-Clause
// Join: uneven inputs. Each step begins with an allreduce(sum) of one int32 "still active"
// flag, so every rank, active or joined, learns how many ranks are active and the joined ones
// mirror exactly the collectives of the step (the flag, then the reducer's buckets).
#include <chorus/ddp.hpp>

#include <fmt/format.h>

#include <chorus/work.hpp>

namespace chorus::ddp {

EarlyTermination::EarlyTermination(const std::string& message, ErrorContext context)
    : Error(ErrorCode::aborted, message, std::move(context)) {}
EarlyTermination::~EarlyTermination() = default;

Join::Join(GradientReducer& reducer, JoinOptions options) : reducer_(reducer), options_(options) {}

int Join::exchange_active_flag(int flag) {
  std::int32_t value = flag;
  reducer_.group()
      .allreduce(Tensor::of(&value, 1),
                 AllreduceOptions{.op = ReduceOp::sum, .timeout = options_.timeout})
      ->wait();
  active_ranks_ = value;
  if (!options_.divide_by_initial_world_size && value > 0) {
    reducer_.set_divisor(static_cast<double>(value));
  } else {
    reducer_.set_divisor(std::nullopt);
  }
  return value;
}

namespace {
[[noreturn]] void throw_early(const ProcessGroup& g, int active, std::uint64_t step,
                              bool this_rank_out) {
  ErrorContext ctx;
  ctx.rank = g.rank();
  ctx.size = g.size();
  ctx.group = g.name();
  ctx.op = "ddp.join";
  throw EarlyTermination(
      fmt::format(
          "Join on rank {}/{} [{}]: {} at step {} ({} of {} ranks still have data) and "
          "throw_on_early_termination is set, so every rank stops here; give every rank the same "
          "number of batches (DistributedSampler with drop_last) or turn the option off to train on "
          "uneven inputs",
          g.rank(), g.size(), g.name(),
          this_rank_out ? "this rank ran out of data" : "a rank ran out of data", step, active,
          g.size()),
      std::move(ctx));
}
}  // namespace

int Join::begin_step() {
  ++steps_;
  const int active = exchange_active_flag(1);
  if (options_.throw_on_early_termination && active < reducer_.group().size()) {
    throw_early(reducer_.group(), active, steps_, false);
  }
  return active;
}

void Join::join(const std::function<void()>& after_shadow_step) {
  for (;;) {
    const int active = exchange_active_flag(0);
    if (active == 0) {
      return;  // every rank has joined: the others leave this same iteration
    }
    if (options_.throw_on_early_termination) {
      throw_early(reducer_.group(), active, steps_ + 1, true);
    }
    // Mirror the step's buckets with zero gradients (nothing is marked on this rank).
    ++shadow_steps_;
    ++steps_;
    reducer_.finish();
    if (after_shadow_step) {
      after_shadow_step();
    }
  }
}

}  // namespace chorus::ddp
