// SPDX-License-Identifier: BSD-3-Clause
// Engine: how ops end other than by completing (see engine.hpp, "Failure model"): deadlines and
// the status probe of a timed-out op, silent peers, a call task's held failure, poisoning the
// group and telling the peers (fail_group), a peer's news, and shutdown. Kept apart from
// engine.cpp, which runs ops; the wording of each failure is FailureReport's.
#include "cpu/engine/engine.hpp"

#include <fmt/format.h>

#include "core/logging.hpp"

namespace chorus::cpu {

void Engine::check_held_failure() {
  if (!held_failure_ || failure_ || !held_until_.expired()) {
    return;
  }
  const LocalFailure f = *held_failure_;
  const Op* op = current_.get();
  fail_group(report_.error(ErrorCode::network, op, f.what, {f.peer}), true, f.peer);
}

void Engine::tend_liveness() {
  if (failure_) {
    return;
  }
  if (const auto silent = liveness_.tend(*transport_)) {
    fail_group(
        report_.silent_peer(current_.get(), silent->peer, silent->silent, liveness_.peer_timeout()),
        true, silent->peer);
  }
}

void Engine::check_deadlines() {
  if (failure_) {
    return;
  }
  if (probe_) {
    if (probe_->settled()) {
      conclude_probe();
    }
    return;
  }
  // Nothing is due (the usual case): no scan of the queue.
  if (deadlines_.empty() || Clock::now() < *deadlines_.begin()) {
    return;
  }
  Op* expired = nullptr;
  auto consider = [&](Op* op) {
    if (op->call.deadline.expired() &&
        (!expired || op->call.deadline.when() < expired->call.deadline.when())) {
      expired = op;
    }
  };
  if (current_) {
    consider(current_.get());
  }
  for (auto& op : queue_) {
    consider(op.get());
  }
  for (auto& [token, op] : p2p_) {
    consider(op.get());
  }
  if (expired) {
    start_probe(expired);
  }
}

void Engine::start_probe(Op* op) {
  probe_.emplace(op, config_.rank, config_.size, *transport_);
  check_deadlines();
}

void Engine::conclude_probe() {
  const StatusProbe probe = std::move(*probe_);
  probe_.reset();
  const Op* op = probe.op();
  // What the op waits for, as far as this rank can tell.
  std::vector<int> direct;
  std::string waiting;
  if (op == current_.get() && op->via_small_ops) {
    for (const auto& [peer, last] : small_ops_->missing(op->sig.seq)) {
      direct.push_back(peer);
    }
    waiting = direct.empty() ? "" : " waiting for the small-op entries of ";
  } else if (op == current_.get() && executor_) {
    direct = executor_->waiting_for_recv();
    if (!direct.empty()) {
      waiting = " waiting for data from ";
    } else {
      direct = executor_->waiting_for_send();
      waiting = direct.empty() ? "" : " waiting for these ranks to read what it sent: ";
    }
  } else if (op->kind == Op::Kind::recv && op->peer == kAnyPeer) {
    waiting = " waiting for a message from any rank";
  } else if (op->kind != Op::Kind::collective) {
    direct = {op->peer};
    waiting = op->kind == Op::Kind::recv ? " waiting for a message from "
                                         : " waiting for this send to be read by ";
  } else if (current_) {
    waiting = fmt::format(" queued behind {}, which was still running", current_->what());
  }
  std::vector<int> culprits;
  std::exception_ptr error =
      report_.timeout(*op, std::move(waiting), direct, probe.findings(),
                      StatusProbe::grace(op->call.timeout), *transport_, culprits);
  const int root = culprits.empty() ? config_.rank : culprits.front();
  fail_group(std::move(error), true, root);
}

void Engine::fail_from_news(int from, const AbortNotice& n, bool left) {
  int root = from;
  std::string root_message;
  std::exception_ptr error = report_.from_news(current_.get(), from, n, left, root, root_message);
  // Pass the news on: links are made on demand, so the peers linked to this rank may have no
  // link to the sender (and a goodbye went only here anyway). A rank that already failed
  // ignores it, so the news crosses every link once; neither the sender nor the root needs it.
  fail_group(std::move(error), true, root, std::move(root_message), from);
}

void Engine::fail_group(std::exception_ptr error, bool notify_peers, int root_rank,
                        std::string root_message, int news_from) {
  if (failure_) {
    return;
  }
  failure_ = error;
  // From here on submit() fails ops itself: take_pending() below sees the last one queued.
  submitted_.fail(error);
  if (config_.on_failure) {
    config_.on_failure(error);
  }
  const AbortNotice notice = notice_of(
      error, report_.valid_rank(root_rank) ? root_rank : config_.rank, std::move(root_message));
  failure_notice_ = notice;
  // A background thread has no caller to throw to: it logs the failure once, here.
  CHORUS_WARN(coll, "group failed: {}", notice.message);
  transport_->drop_all();
  if (notify_peers) {
    const std::vector<std::uint8_t> payload = encode(notice);
    const bool forwarded = news_from >= 0;
    for (int p = 0; p < config_.size; ++p) {
      if (p != config_.rank && !(forwarded && (p == news_from || p == notice.root_rank))) {
        transport_->send_control(p, FrameType::abort, payload);
      }
    }
  }
  std::vector<std::unique_ptr<Op>> failed;
  take_pending(failed);
  // After the executor and schedule are gone (take_pending()): the arena holds their scratch.
  // The probe points at an op that `failed` still owns.
  arena_.reset();
  probe_.reset();
  for (auto& op : failed) {
    op->work->complete(error);
  }
}

void Engine::shutdown() {
  std::exception_ptr gone = failure_;
  if (!gone) {
    gone = report_.error(ErrorCode::aborted, nullptr,
                         "the group was destroyed while this op was pending", {});
  }
  // Pending ops fail and their buffers are released; peers hear a goodbye, not an abort:
  // they fail only if they still needed this rank.
  std::vector<std::unique_ptr<Op>> pending;
  take_pending(pending);
  transport_->drop_all();
  for (auto& op : pending) {
    op->work->complete(gone);
  }
  // The goodbye of a failed group carries its root cause: a peer that hears of this rank
  // leaving before it hears of the failure still names the rank where it began.
  Goodbye bye;
  bye.last_seq = submitted_.issued();
  if (failure_) {
    bye.cause = failure_notice_;
  }
  const std::vector<std::uint8_t> payload = encode(bye);
  for (int p = 0; p < config_.size; ++p) {
    if (p != config_.rank) {
      transport_->send_control(p, FrameType::goodbye, payload);
    }
  }
  transport_->flush_control(Deadline::after(std::chrono::seconds(2)));
  transport_->close_all();
  submitted_.answer_abort();  // no loop any more to take an abort request: its waiters go
}

void Engine::take_pending(std::vector<std::unique_ptr<Op>>& into) {
  if (current_) {
    into.push_back(std::move(current_));
  }
  executor_.reset();
  schedule_.reset();
  for (auto& op : queue_) {
    into.push_back(std::move(op));
  }
  queue_.clear();
  for (auto& [token, op] : p2p_) {
    into.push_back(std::move(op));
  }
  p2p_.clear();
  deadlines_.clear();
  submitted_.drain(into);
}

}  // namespace chorus::cpu
