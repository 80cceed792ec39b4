// SPDX-License-Identifier: BSD-3-Clause
// Engine: ops run through the transport's SmallOps capability (small_ops.hpp), by the issuing
// caller (run_small_op) or by the loop in turn (settle_small_op). The capability owns the
// shared state and the waiting; the engine keeps the op: its order, deadline and failures. Kept
// apart from engine.cpp because such an op bypasses the schedule, the executor and the
// transfers.
#include "cpu/engine/engine.hpp"

#include <fmt/format.h>

namespace chorus::cpu {

void Engine::settle_small_op() {
  const Op& op = *current_;
  std::optional<SmallOps::Mismatch> mismatch;
  if (small_ops_->ready(op.sig, mismatch)) {
    small_ops_->finish(op.args.out, op.args.count, op.args.dtype, op.args.op);
    finish_current(nullptr);
  } else if (mismatch) {
    fail_group(
        report_.mismatch(op, mismatch->peer,
                         describe_mismatch(op.sig, config_.rank, mismatch->theirs, mismatch->peer)),
        true, config_.rank);
  } else {
    for (const auto& [peer, last] : small_ops_->missing(op.sig.seq)) {
      if (left_[static_cast<std::size_t>(peer)]) {
        fail_group(
            report_.peer_left(&op, peer, fmt::format("its last collective was seq {}", last)), true,
            peer);
        return;
      }
    }
  }
}

bool Engine::run_small_op(Op& op, std::exception_ptr& error) {
  submitted_.note_issued(op.call.seq);
  SmallOps& small = *small_ops_;
  small.publish(op.sig, op.args.in, op.bytes);
  op.small_published = true;
  // The caller holds the group's issue lock: other threads cannot issue anything (a tagged send
  // a late peer may be waiting for) until this returns. So it waits here only briefly. (From the
  // issue time: no clock read on the way.)
  const Deadline here = earliest(op.call.deadline, Deadline::at(op.call.issued + kInlineWait));
  bool woken = false;
  for (;;) {
    const std::uint64_t seen = small.snapshot();
    std::optional<SmallOps::Mismatch> mismatch;
    const bool ready = small.ready(op.sig, mismatch);
    if (!woken) {
      // After the first look: the wake may wait for the publish to reach the peers (a fence),
      // and that look fetched their entries meanwhile.
      small.wake_peers();
      woken = true;
    }
    if (ready) {
      small.finish(op.args.out, op.args.count, op.args.dtype, op.args.op);
      return true;
    }
    if (std::exception_ptr failed = submitted_.failure()) {
      error = std::move(failed);
      return true;
    }
    if (mismatch) {
      // The engine takes it from here: it finds the same mismatch and fails the group.
      return false;
    }
    if (!small.wait(seen, here) && here.expired()) {
      // The engine takes it from here: it waits for late peers, or times out and fails the
      // group (after probing the peers), naming them with addresses. (The clock is read only
      // after a wait that saw nothing change: a peer's publish usually ends the wait first.)
      return false;
    }
  }
}

}  // namespace chorus::cpu
