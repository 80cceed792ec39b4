// SPDX-License-Identifier: BSD-3-Clause
// Engine: submit, one turn of the loop, the op queue, completions and events (see engine.hpp for
// the model and where the rest lives).
#include "cpu/engine/engine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <chorus/errors.hpp>

namespace chorus::cpu {
namespace {

constexpr std::uint64_t kP2pTokenBit = 1ull << 63;

}  // namespace

Engine::Engine(EngineConfig config, std::unique_ptr<EngineTransport> transport)
    : config_(std::move(config)),
      transport_(std::move(transport)),
      small_ops_(transport_->small_ops()),
      local_address_(transport_->local_address()),
      report_(config_.rank, config_.size, config_.group, *transport_),
      liveness_(config_.rank, config_.size, config_.peer_timeout) {
  left_.resize(static_cast<std::size_t>(config_.size), false);
  runner_.start(fmt::format("{} r{}/{}", config_.group, config_.rank, config_.size));
}

Engine::~Engine() {
  // The queue first: an abort() that has not begun waiting returns at once. Then the loop stops:
  // its last act, shutdown(), fails what is pending and releases abort()'s waiters.
  submitted_.close();
  runner_.stop();
}

void Engine::submit(std::unique_ptr<Op> op) {
  const bool driven = op->work->has_driver();
  if (op->kind == Op::Kind::collective) {
    submitted_.note_issued(op->call.seq);
  }
  if (std::exception_ptr failed = submitted_.push(op)) {
    op->work->complete(failed);  // outside the queue's lock, as every completion
    return;
  }
  // An op whose caller may drive the loop (drive()) does not unpark the engine thread: if
  // nobody waits for it, the engine looks in within kParkTick.
  if (driven) {
    transport_->wakeup();
  } else {
    runner_.poke();
  }
}

void Engine::abort(std::exception_ptr error) {
  if (on_engine_thread()) {
    fail_group(std::move(error), true, config_.rank);
    return;
  }
  submitted_.post_abort(std::move(error));
  runner_.poke();
  // The engine answers within one loop iteration (it never blocks on a peer); the bound only
  // guards against a bug turning abort() into a hang.
  submitted_.wait_abort_answered(std::chrono::seconds(10));
}

void Engine::turn(bool wait, const WorkState* driven) {
  take_submitted();
  start_next();
  // After take_submitted(): the deadlines of the ops just taken count. A driving caller whose
  // op completed above (say, an abort) does not wait: it leaves.
  const bool done = driven != nullptr && driven->is_completed();
  const Deadline until = wait && !done ? nearest_deadline() : Deadline::after(Duration::zero());
  PollHint hint;
  hint.spin = spin_budget();
  hint.small_op = current_ && current_->via_small_ops;
  transport_->before_poll(hint);
  try {
    transport_->poll(until, completed_, events_);
  } catch (const std::exception& e) {
    fail_group(report_.error(ErrorCode::internal, nullptr,
                             fmt::format("event loop failed: {}", e.what()), {}),
               true, config_.rank);
  }
  for (std::uint64_t token : completed_) {
    on_completion(token);
  }
  completed_.clear();
  for (auto& ev : events_) {
    on_event(ev);
  }
  events_.clear();
  if (current_ && current_->via_small_ops && !failure_) {
    settle_small_op();
  }
  release_held_headers();
  check_held_failure();
  check_deadlines();
  tend_liveness();
}

bool Engine::holds_work() const noexcept {
  return current_ || !queue_.empty() || !p2p_.empty() || probe_ || held_failure_;
}

void Engine::release_held_headers() {
  if (executor_ && !failure_ && headers_until_.expired()) {
    headers_until_ = Deadline::never();
    executor_->release_headers();
  }
}

std::chrono::microseconds Engine::spin_budget() const {
  if (current_) {
    const bool small = !current_->via_small_ops && current_->bytes <= kSpinMaxBytes;
    return small ? kSpin : std::chrono::microseconds::zero();
  }
  const auto linger = std::chrono::ceil<std::chrono::microseconds>(linger_until_ - Clock::now());
  return queue_.empty() ? std::max(linger, std::chrono::microseconds::zero())
                        : std::chrono::microseconds::zero();
}

void Engine::take_submitted() {
  std::vector<std::unique_ptr<Op>> ops;
  ops.swap(taken_);  // empty, with the memory of an earlier batch: submitters append there
  if (std::exception_ptr abort_request = submitted_.take(ops)) {
    fail_group(abort_request, true, config_.rank);
    submitted_.answer_abort();
  }
  for (auto& op : ops) {
    if (failure_) {
      op->work->complete(failure_);
      continue;
    }
    track_deadline(*op);
    if (op->kind == Op::Kind::collective) {
      queue_.push_back(std::move(op));
      continue;
    }
    const std::uint64_t token = kP2pTokenBit | next_p2p_token_++;
    Op& p = *op;
    p2p_.emplace(token, std::move(op));
    if (p.kind == Op::Kind::send) {
      transport_->send_p2p(p.peer, p.tag, p.data, p.bytes, token);
    } else {
      transport_->recv_p2p(p.peer, p.tag, p.data, p.bytes, token);
    }
  }
  ops.clear();
  taken_.swap(ops);
}

void Engine::start_next() {
  while (!current_ && !queue_.empty() && !failure_) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    if (current_->via_small_ops) {
      transport_->op_starting(current_->sig);
      if (!current_->small_published) {  // else handed over by run_small_op(): published
        if (config_.on_start) {
          config_.on_start(current_->call, small_ops_->name());
        }
        small_ops_->publish(current_->sig, current_->args.in, current_->bytes);
        small_ops_->wake_peers();
      }
      settle_small_op();
      continue;
    }
    if (small_ops_ != nullptr) {
      small_ops_->announce(current_->sig);
    }
    build_run(*current_);
    transport_->op_starting(current_->sig);
    if (config_.on_start) {
      config_.on_start(current_->call, schedule_->algorithm());
    }
    executor_->start();
    headers_until_ = executor_->holds_headers() ? Deadline::after(kHeaderHold) : Deadline::never();
    settle_current();
  }
}

void Engine::build_run(const Op& op) {
  const bool reuse = spare_schedule_ != nullptr && spare_executor_ != nullptr;
  if (reuse) {
    schedule_ = std::move(spare_schedule_);
    schedule_->clear(op.args.dtype, op.args.op);
  } else {
    spare_executor_.reset();
    schedule_ =
        std::make_unique<Schedule>(config_.rank, config_.size, op.args.dtype, op.args.op, arena_);
  }
  build_schedule(*schedule_, op.args);
  schedule_->finalize(op.sig);
  const std::uint64_t tokens = (++epoch_) << 32;
  if (reuse) {
    executor_ = std::move(spare_executor_);  // bound to schedule_ (recycle_run())
    executor_->restart(tokens);
  } else {
    executor_ = std::make_unique<Executor>(*transport_, *schedule_, tokens);
  }
}

void Engine::recycle_run() noexcept {
  if (!schedule_ || !executor_) {
    executor_.reset();
    schedule_.reset();
    return;
  }
  schedule_->clear(schedule_->dtype(), schedule_->op());  // lets go of call tasks' captures
  spare_schedule_ = std::move(schedule_);
  spare_executor_ = std::move(executor_);
}

void Engine::track_deadline(const Op& op) {
  if (!op.call.deadline.is_never()) {
    deadlines_.insert(op.call.deadline.when());
  }
}

void Engine::untrack_deadline(const Op& op) {
  if (!op.call.deadline.is_never()) {
    const auto it = deadlines_.find(op.call.deadline.when());
    if (it != deadlines_.end()) {
      deadlines_.erase(it);
    }
  }
}

void Engine::finish_current(std::exception_ptr error) {
  std::unique_ptr<Op> op = std::move(current_);
  untrack_deadline(*op);
  recycle_run();
  arena_.reset();
  if (probe_ && probe_->op() == op.get()) {
    probe_.reset();  // it made it after all, within the probe's grace
  }
  if (!op->via_small_ops && op->bytes <= kSpinMaxBytes) {
    linger_until_ = Clock::now() + kSpin;
  }
  op->work->complete(std::move(error));
}

void Engine::on_completion(std::uint64_t token) {
  if (!executor_ || !executor_->owns(token)) {
    return;  // a transfer of an op that already failed
  }
  executor_->complete(token);
  settle_current();
}

void Engine::settle_current() {
  if (executor_->local_failure()) {
    if (!held_failure_) {
      held_failure_ = executor_->local_failure();
      held_until_ = Deadline::after(kLocalFailureGrace);
    }
  } else if (executor_->failed()) {
    const SignatureMismatch& m = *executor_->mismatch();
    const Op* op = current_.get();
    std::string what;
    if (m.theirs) {
      what = describe_mismatch(op->sig, config_.rank, *m.theirs, m.peer);
    } else {
      what = fmt::format(
          "the data from rank {} is not a signature header: its stream is out of step", m.peer);
    }
    fail_group(report_.mismatch(*op, m.peer, what), true, config_.rank);
  } else if (executor_->done()) {
    if (Schedule::Continuation next = schedule_->take_continuation()) {
      start_continuation(std::move(next));
      return;
    }
    finish_current(nullptr);
  }
}

void Engine::start_continuation(Schedule::Continuation next) {
  // The same op goes on: its scratch (what the first phase received) stays, its tokens change.
  schedule_->clear(schedule_->dtype(), schedule_->op());
  next(*schedule_);
  schedule_->finalize_continuation(current_->sig);
  if (config_.on_start) {
    config_.on_start(current_->call, schedule_->algorithm());  // what the first phase chose
  }
  executor_->restart((++epoch_) << 32);
  executor_->start();
  settle_current();
}

void Engine::on_event(TransportEvent& ev) {
  switch (ev.kind) {
    case TransportEvent::Kind::p2p_done:
      finish_p2p(ev);
      return;
    case TransportEvent::Kind::peer_failed: {
      if (failure_) {
        return;
      }
      fail_group(report_.peer_failed(current_.get(), ev), true, ev.peer);
      return;
    }
    case TransportEvent::Kind::control:
      on_control(ev);
      return;
    case TransportEvent::Kind::local_failure: {
      if (failure_) {
        return;
      }
      const Op* op = current_.get();
      fail_group(report_.error(ev.code, op, ev.error, {config_.rank}), true, config_.rank);
      return;
    }
  }
}

void Engine::finish_p2p(const TransportEvent& ev) {
  auto it = p2p_.find(ev.token);
  if (it == p2p_.end()) {
    return;
  }
  std::unique_ptr<Op> op = std::move(it->second);
  p2p_.erase(it);
  untrack_deadline(*op);
  if (op->kind == Op::Kind::recv) {
    op->work->set_source_rank(ev.peer);  // says who sent it, for a recv from any rank
  }
  if (probe_ && probe_->op() == op.get()) {
    probe_.reset();
  }
  std::exception_ptr error;
  if (!ev.error.empty()) {
    error = report_.error(ErrorCode::invalid_argument, op.get(), ev.error, {ev.peer});
  }
  op->work->complete(error);
}

void Engine::on_abort_notice(const TransportEvent& ev) {
  if (failure_) {
    return;
  }
  if (auto notice = decode_abort(ev.payload)) {
    fail_from_news(ev.peer, *notice, false);
  } else {
    const Op* op = current_.get();
    fail_group(report_.error(ErrorCode::network, op,
                             fmt::format("{} failed and aborted the group (its notice was "
                                         "unreadable)",
                                         report_.rank_name(ev.peer)),
                             {ev.peer}),
               false, ev.peer);
  }
}

void Engine::on_goodbye(const TransportEvent& ev) {
  // A goodbye alone fails nothing (the peer's transport reports it if this rank still needs the
  // peer; a small op looks at left_). A goodbye of a failed group is news of that failure, with
  // its root.
  left_[static_cast<std::size_t>(ev.peer)] = true;
  const auto bye = decode_goodbye(ev.payload);
  if (!failure_ && bye && bye->cause) {
    fail_from_news(ev.peer, *bye->cause, true);
  } else if (!failure_ && current_ && current_->via_small_ops) {
    settle_small_op();
  }
}

void Engine::on_control(TransportEvent& ev) {
  switch (ev.frame) {
    case FrameType::abort:
      on_abort_notice(ev);
      return;
    case FrameType::goodbye:
      on_goodbye(ev);
      return;
    case FrameType::status_request: {
      StatusReply reply;
      reply.issued_seq = submitted_.issued();
      reply.running_seq = current_ ? current_->call.seq : 0;
      transport_->send_control(ev.peer, FrameType::status_reply, encode(reply));
      return;
    }
    case FrameType::status_reply:
      if (probe_) {
        probe_->answer(ev.peer, decode_status(ev.payload));
      }
      return;
    case FrameType::p2p:
    case FrameType::p2p_more:
    case FrameType::heartbeat:  // the transport keeps these (it notes when each peer was heard)
    case FrameType::link_release:
    case FrameType::link_release_ok:
    case FrameType::link_release_no:
      return;
  }
}

Deadline Engine::nearest_deadline() const {
  if (failure_) {
    return Deadline::never();
  }
  const Deadline liveness = earliest(earliest(liveness_.deadline(), held_until_),
                                     executor_ ? headers_until_ : Deadline::never());
  if (probe_) {
    return earliest(probe_->until(), liveness);
  }
  return deadlines_.empty() ? liveness : earliest(liveness, Deadline::at(*deadlines_.begin()));
}

}  // namespace chorus::cpu
