// SPDX-License-Identifier: BSD-3-Clause
// Engine: ops run through the small-op board (see engine.hpp and slot_board.hpp), by the
// issuing caller (run_on_board) or by the loop in turn (settle_board). Kept apart from
// engine.cpp because a board op bypasses the schedule, the executor and the transport.
#include "cpu/engine/engine.hpp"

#include <fmt/format.h>

namespace chorus::cpu {

void Engine::settle_board() {
  const Op& op = *current_;
  std::optional<SlotBoard::Mismatch> mismatch;
  if (config_.board->ready(op.sig, mismatch)) {
    config_.board->finish(op.args.out, op.args.count, op.args.dtype, op.args.op);
    finish_current(nullptr);
  } else if (mismatch) {
    fail_group(
        report_.mismatch(op, mismatch->peer,
                         describe_mismatch(op.sig, config_.rank, mismatch->theirs, mismatch->peer)),
        true, config_.rank);
  } else {
    for (const auto& [peer, last] : config_.board->missing(op.sig.seq)) {
      if (left_[static_cast<std::size_t>(peer)]) {
        fail_group(
            report_.peer_left(&op, peer, fmt::format("its last collective was seq {}", last)), true,
            peer);
        return;
      }
    }
  }
}

bool Engine::run_on_board(Op& op, std::exception_ptr& error) {
  note_issued(op.call.seq);
  SlotBoard& board = *config_.board;
  board.publish(op.sig, op.args.in, op.bytes);
  op.board_started = true;
  // The caller holds the group's issue lock: other threads cannot issue anything (a tagged send
  // a late peer may be waiting for) until this returns. So it waits here only briefly. (From the
  // issue time: no clock read on the way.)
  const Deadline here = earliest(op.call.deadline, Deadline::at(op.call.issued + kInlineWait));
  bool woken = false;
  for (;;) {
    const std::uint64_t seen = board.snapshot();
    std::optional<SlotBoard::Mismatch> mismatch;
    const bool ready = board.ready(op.sig, mismatch);
    if (!woken) {
      // After the first look: the wake's fence then waits for a publish that has been reaching
      // the peers meanwhile, while that look fetched their slots.
      board.wake_peers();
      woken = true;
    }
    if (ready) {
      board.finish(op.args.out, op.args.count, op.args.dtype, op.args.op);
      return true;
    }
    if (has_failed_.load(std::memory_order_acquire)) {
      std::lock_guard lock(mu_);
      error = failed_;
      return true;
    }
    if (mismatch) {
      // The engine takes it from here: it finds the same mismatch and fails the group.
      return false;
    }
    if (!board.wait(seen, here) && here.expired()) {
      // The engine takes it from here: it waits for late peers, or times out and fails the
      // group (after probing the peers), naming them with addresses. (The clock is read only
      // after a wait that saw nothing change: a peer's publish usually ends the spin first.)
      return false;
    }
  }
}

}  // namespace chorus::cpu
