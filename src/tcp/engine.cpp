// SPDX-License-Identifier: BSD-3-Clause
// Engine: the progress loop, deadlines and the failure protocol (see engine.hpp).
#include "tcp/engine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "tcp/futex.hpp"

namespace chorus::tcp {
namespace {

constexpr std::uint64_t kP2pTokenBit = 1ull << 63;

std::exception_ptr make_error(ErrorCode code, const std::string& message, ErrorContext ctx) {
  try {
    throw_error(code, message, std::move(ctx));
  } catch (...) {
    return std::current_exception();
  }
}

// How long a timed-out rank waits for its peers' status replies before naming the silent
// ones. Long enough for a loaded machine to answer, short next to the op's timeout.
Duration probe_grace(Duration timeout) {
  return std::clamp<Duration>(timeout / 10, std::chrono::milliseconds(100),
                              std::chrono::seconds(2));
}

}  // namespace

Engine::Engine(EngineConfig config, std::unique_ptr<EngineTransport> transport)
    : config_(std::move(config)), transport_(std::move(transport)) {
  local_address_ = transport_->local_address();
  addresses_.resize(static_cast<std::size_t>(config_.size));
  left_.resize(static_cast<std::size_t>(config_.size), false);
  addresses_[static_cast<std::size_t>(config_.rank)] = local_address_;
  // Not at once: the mesh's setup was just heard from everyone, and a short-lived group
  // (created, one op, destroyed) then sends no heartbeat at all.
  next_heartbeat_ = Clock::now() + config_.peer_timeout / 4;
  next_silence_check_ = Clock::now() + config_.peer_timeout;
  gate_ = std::make_shared<Gate>(this);
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopping_.store(true);
  poke();          // a driver in poll() returns and sees stopping_
  gate_->close();  // no new driver; waits for the ones inside
  if (thread_.joinable()) {
    thread_.join();
  }
}

// Links are made on demand, so a peer's address is learned late: asked again until known.
const std::string& Engine::peer_address(int rank) const {
  std::string& known = addresses_[static_cast<std::size_t>(rank)];
  if (known.empty()) {
    known = transport_->address(rank);
  }
  return known;
}

std::string Engine::rank_name(int rank) const {
  const std::string& address = peer_address(rank);
  return address.empty() ? fmt::format("rank {}", rank)
                         : fmt::format("rank {} ({})", rank, address);
}

std::string Engine::prefix(const Op* op) const {
  return fmt::format("{} on rank {}/{} [{}]", op ? op->what() : std::string("tcp group"),
                     config_.rank, config_.size, config_.group);
}

ErrorContext Engine::context(const Op* op, std::vector<int> peers) const {
  ErrorContext c;
  c.rank = config_.rank;
  c.size = config_.size;
  c.group = config_.group;
  if (op) {
    c.op = op->call.name;
    c.seq = op->call.seq;
    c.bytes = op->bytes;
    c.timeout = op->call.timeout;
    c.elapsed = std::chrono::duration_cast<Duration>(Clock::now() -
                                                     (op->call.deadline.when() - op->call.timeout));
  }
  if (!peers.empty()) {
    c.peer_address = peer_address(peers.front());
  }
  c.peers = std::move(peers);
  return c;
}

void Engine::note_issued(std::uint64_t seq) noexcept {
  // Callers hold the group's issue lock, so writers take turns: a load and a store will do (no
  // locked instruction on every op).
  if (issued_seq_.load(std::memory_order_relaxed) < seq) {
    issued_seq_.store(seq, std::memory_order_relaxed);
  }
}

void Engine::submit(std::unique_ptr<Op> op) {
  const bool driven = op->work->has_driver();
  if (op->kind == Op::Kind::collective) {
    note_issued(op->call.seq);
  }
  std::exception_ptr failed;
  {
    std::lock_guard lock(mu_);
    if (failed_) {
      failed = failed_;
    } else {
      submitted_.push_back(std::move(op));
    }
  }
  if (failed) {
    op->work->complete(failed);
    return;
  }
  // An op whose caller may drive the loop (drive()) does not unpark the engine thread: if
  // nobody waits for it, the engine looks in within kParkTick.
  if (driven) {
    transport_->wakeup();
  } else {
    poke();
  }
}

void Engine::abort(std::exception_ptr error) {
  if (on_engine_thread()) {
    fail_group(std::move(error), true, config_.rank);
    return;
  }
  std::unique_lock lock(mu_);
  abort_request_ = std::move(error);
  abort_done_ = false;
  lock.unlock();
  poke();
  lock.lock();
  // The engine answers within one loop iteration (it never blocks on a peer); the bound only
  // guards against a bug turning abort() into a hang.
  cv_.wait_for(lock, std::chrono::seconds(10), [&] { return abort_done_ || stop_; });
}

void Engine::run() noexcept {
  log::set_thread_context(fmt::format("{} r{}/{}", config_.group, config_.rank, config_.size));
  std::unique_lock lease(lease_);
  runner_.store(std::this_thread::get_id());
  // Parked: a caller drove the loop within kParkKeep. The engine thread then stays off the
  // sockets and looks in once per kParkTick (heartbeats, news, ops nobody waits on); less often
  // while one caller's drive goes on (a wait for a late peer: that caller runs everything), up
  // to kParkTickMax; such a drive pokes the engine thread when it ends. While callers drive one
  // op after another and the looks find nothing to do, the tick grows up to kParkTickBusy.
  bool parked = false;
  auto tick = kParkTick;
  std::uint64_t drives_seen = drives_.load();
  while (!stopping_.load()) {
    if (drivers_waiting_.load() > 0 || parked) {
      if (lease.owns_lock()) {
        runner_.store(std::thread::id());
        lease.unlock();
      }
      park(tick);
      if (stopping_.load() || drivers_waiting_.load() > 0 || !lease.try_lock()) {
        parked = true;  // a caller drives, or is about to
        const std::uint64_t drives = std::exchange(drives_seen, drives_.load());
        tick = drives == drives_seen ? std::min(2 * tick, kParkTickMax)
                                     : std::min(2 * tick, kParkTickBusy);
        continue;
      }
      runner_.store(std::this_thread::get_id());
      iterate(false);
      // Work that no caller drives (an op nobody waits on yet, a tagged message, a probe)
      // needs the engine thread's own loop.
      parked = Clock::now() - last_drive_end_ < kParkKeep && !current_ && queue_.empty() &&
               p2p_.empty() && !probe_ && !held_failure_;
      const std::uint64_t drives = std::exchange(drives_seen, drives_.load());
      tick = parked && drives != drives_seen ? std::min(2 * tick, kParkTickBusy) : kParkTick;
      continue;
    }
    iterate(true);
  }
  if (!lease.owns_lock()) {
    lease.lock();  // drivers give the loop back once stopping_ is set
  }
  runner_.store(std::this_thread::get_id());
  shutdown();
}

void Engine::iterate(bool wait, const WorkState* driven) {
  take_submitted();
  start_next();
  // After take_submitted(): the deadlines of the ops just taken count. A driving caller whose
  // op completed above (say, an abort) does not wait: it leaves.
  const bool done = driven != nullptr && driven->is_completed();
  const Deadline until = wait && !done ? nearest_deadline() : Deadline::after(Duration::zero());
  transport_->await_board(current_ && current_->on_board);
  transport_->spin_before_sleep(spin_budget());
  try {
    transport_->poll(until, completed_, events_);
  } catch (const std::exception& e) {
    fail_group(make_error(ErrorCode::internal,
                          fmt::format("{}: event loop failed: {}", prefix(nullptr), e.what()),
                          context(nullptr, {})),
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
  if (current_ && current_->on_board && !failure_) {
    settle_board();
  }
  release_held_headers();
  check_held_failure();
  check_deadlines();
  tend_liveness();
}

void Engine::release_held_headers() {
  if (executor_ && !failure_ && headers_until_.expired()) {
    headers_until_ = Deadline::never();
    executor_->release_headers();
  }
}

void Engine::park(std::chrono::milliseconds tick) noexcept {
  const std::uint32_t seq = park_seq_.load();
  parked_.store(true);
  // A poke() made before the load above set poked_ first; one made after it changed the word.
  if (!poked_.exchange(false) && !stopping_.load()) {
    futex_wait(park_seq_, seq, tick);
  }
  parked_.store(false);
  poked_.store(false);
}

void Engine::poke() noexcept {
  poked_.store(true);
  park_seq_.fetch_add(1);
  if (parked_.load()) {
    futex_wake(park_seq_);
  }
  transport_->wakeup();
}

void Engine::Gate::drive(const WorkState& work) noexcept {
  Engine* engine = nullptr;
  {
    std::lock_guard lock(mu_);
    engine = engine_;
    if (engine == nullptr) {
      return;
    }
    ++inside_;
  }
  engine->drive(work);
  {
    std::lock_guard lock(mu_);
    --inside_;
  }
  cv_.notify_all();
}

void Engine::Gate::close() noexcept {
  // Not bounded by a deadline, like the join after it: the engine cannot go while a driver
  // still runs its loop. Each driver returns within one poll of the poke() that follows
  // stopping_ (the destructor makes both before it closes the gate).
  std::unique_lock lock(mu_);
  engine_ = nullptr;
  cv_.wait(lock, [&] { return inside_ == 0; });
}

void Engine::drive(const WorkState& work) noexcept {
  const std::thread::id me = std::this_thread::get_id();
  if (me == thread_.get_id() || runner_.load() == me) {
    return;
  }
  drivers_waiting_.fetch_add(1);
  transport_->wakeup();  // the engine thread leaves its poll and parks
  std::unique_lock lease(lease_, std::defer_lock);
  while (!lease.try_lock()) {
    // Another caller drives: this one waits for its Work instead of for the loop.
    const std::thread::id runner = runner_.load();
    if (work.is_completed() || stopping_.load() ||
        (runner != std::thread::id() && runner != thread_.get_id())) {
      drivers_waiting_.fetch_sub(1);
      return;
    }
    std::this_thread::yield();
  }
  drivers_waiting_.fetch_sub(1);
  runner_.store(me);
  drives_.fetch_add(1);
  const Clock::time_point start = Clock::now();
  while (!work.is_completed() && !stopping_.load()) {
    iterate(true, &work);
  }
  const Clock::time_point end = Clock::now();
  last_drive_end_ = end;
  runner_.store(std::thread::id());
  lease.unlock();
  if (end - start > kParkTick) {
    poke();  // the engine thread may have slowed its looks meanwhile
  }
}

std::chrono::microseconds Engine::spin_budget() const {
  if (current_) {
    const bool small = !current_->on_board && current_->bytes <= kSpinMaxBytes;
    return small ? kSpin : std::chrono::microseconds::zero();
  }
  const auto linger = std::chrono::ceil<std::chrono::microseconds>(linger_until_ - Clock::now());
  return queue_.empty() ? std::max(linger, std::chrono::microseconds::zero())
                        : std::chrono::microseconds::zero();
}

void Engine::take_submitted() {
  std::vector<std::unique_ptr<Op>> ops;
  ops.swap(taken_);  // empty, with the memory of an earlier batch: submitters append there
  std::exception_ptr abort_request;
  {
    std::lock_guard lock(mu_);
    ops.swap(submitted_);
    abort_request = std::move(abort_request_);
    abort_request_ = nullptr;
  }
  if (abort_request) {
    fail_group(abort_request, true, config_.rank);
    {
      std::lock_guard lock(mu_);
      abort_done_ = true;
    }
    cv_.notify_all();
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
    if (current_->on_board) {
      transport_->op_started(current_->call.seq);
      if (!current_->board_started) {  // else handed over by run_on_board(): published already
        if (config_.on_start) {
          config_.on_start(current_->call, "board");
        }
        config_.board->publish(current_->sig, current_->args.in, current_->bytes);
        config_.board->wake_peers();
      }
      settle_board();
      continue;
    }
    if (config_.board) {
      config_.board->announce(current_->sig);
    }
    build_run(*current_);
    transport_->op_started(current_->call.seq);
    if (config_.on_start) {
      config_.on_start(current_->call, choose_algorithm(config_.size, current_->args));
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
  if (probe_ && probe_->op == op.get()) {
    probe_.reset();  // it made it after all, within the probe's grace
  }
  if (!op->on_board && op->bytes <= kSpinMaxBytes) {
    linger_until_ = Clock::now() + kSpin;
  }
  op->work->complete(std::move(error));
}

void Engine::settle_board() {
  const Op& op = *current_;
  std::optional<SlotBoard::Mismatch> mismatch;
  if (config_.board->ready(op.sig, mismatch)) {
    config_.board->finish(op.args.out, op.args.count, op.args.dtype, op.args.op);
    finish_current(nullptr);
  } else if (mismatch) {
    fail_group(board_mismatch(op, *mismatch), true, config_.rank);
  } else {
    for (const auto& [peer, last] : config_.board->missing(op.sig.seq)) {
      if (left_[static_cast<std::size_t>(peer)]) {
        fail_group(make_error(ErrorCode::network,
                              fmt::format("{}: {} left the group (destroyed it) while this rank "
                                          "still needed it: its last collective was seq {}; the "
                                          "ranks issued different numbers of collectives",
                                          prefix(&op), rank_name(peer), last),
                              context(&op, {peer})),
                   true, peer);
        return;
      }
    }
  }
}

std::exception_ptr Engine::board_mismatch(const Op& op, const SlotBoard::Mismatch& m) const {
  // Either side may be the odd one: the message names both.
  return make_error(
      ErrorCode::invalid_argument,
      fmt::format("{}: collective mismatch with {}: {}; every rank must issue the same "
                  "collectives, with the same count, dtype, op and root, in the same order",
                  prefix(&op), rank_name(m.peer),
                  describe_mismatch(op.sig, config_.rank, m.theirs, m.peer)),
      context(&op, {m.peer}));
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
    fail_group(
        make_error(
            ErrorCode::invalid_argument,
            fmt::format("{}: collective mismatch with {}: {}; every rank must issue the same "
                        "collectives, with the same count, dtype, op and root, in the same order",
                        prefix(op), rank_name(m.peer), what),
            context(op, {m.peer})),
        true, config_.rank);  // either side may be the odd one: the message names both
  } else if (executor_->done()) {
    finish_current(nullptr);
  }
}

void Engine::check_held_failure() {
  if (!held_failure_ || failure_ || !held_until_.expired()) {
    return;
  }
  const LocalFailure f = *held_failure_;
  const Op* op = current_.get();
  fail_group(make_error(ErrorCode::network, fmt::format("{}: {}", prefix(op), f.what),
                        context(op, {f.peer})),
             true, f.peer);
}

void Engine::on_event(TransportEvent& ev) {
  switch (ev.kind) {
    case TransportEvent::Kind::p2p_done: {
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
      if (probe_ && probe_->op == op.get()) {
        probe_.reset();
      }
      std::exception_ptr error;
      if (!ev.error.empty()) {
        error = make_error(ErrorCode::invalid_argument,
                           fmt::format("{}: {}", prefix(op.get()), ev.error),
                           context(op.get(), {ev.peer}));
      }
      op->work->complete(error);
      return;
    }
    case TransportEvent::Kind::peer_failed: {
      if (failure_) {
        return;
      }
      const Op* op = current_.get();
      std::string what;
      if (ev.left) {
        what = fmt::format(
            "{} left the group (destroyed it) while this rank still needed it: {}; the "
            "ranks issued different numbers of collectives",
            rank_name(ev.peer), ev.error);
      } else {
        what =
            fmt::format("lost the connection to {}: {}; check that rank's log for why it stopped",
                        rank_name(ev.peer), ev.error);
      }
      ErrorContext c = context(op, {ev.peer});
      c.os_error = ev.os_error;
      fail_group(make_error(ErrorCode::network, fmt::format("{}: {}", prefix(op), what), c), true,
                 ev.peer);
      return;
    }
    case TransportEvent::Kind::control:
      on_control(ev);
      return;
    case TransportEvent::Kind::fault: {
      if (failure_) {
        return;
      }
      const Op* op = current_.get();
      fail_group(make_error(ErrorCode::aborted, fmt::format("{}: {}", prefix(op), ev.error),
                            context(op, {config_.rank})),
                 true, config_.rank);
      return;
    }
  }
}

void Engine::on_control(TransportEvent& ev) {
  switch (ev.frame) {
    case FrameType::abort: {
      if (failure_) {
        return;
      }
      if (auto notice = decode_abort(ev.payload)) {
        fail_from_news(ev.peer, *notice, false);
      } else {
        const Op* op = current_.get();
        fail_group(make_error(ErrorCode::network,
                              fmt::format(
                                  "{}: {} failed and aborted the group (its notice was unreadable)",
                                  prefix(op), rank_name(ev.peer)),
                              context(op, {ev.peer})),
                   false, ev.peer);
      }
      return;
    }
    case FrameType::goodbye: {
      // A goodbye alone fails nothing (the peer's transport reports it if this rank still
      // needs the peer; a board op looks at left_). A goodbye of a failed group is news of that
      // failure, with its root.
      left_[static_cast<std::size_t>(ev.peer)] = true;
      const auto bye = decode_goodbye(ev.payload);
      if (!failure_ && bye && bye->cause) {
        fail_from_news(ev.peer, *bye->cause, true);
      } else if (!failure_ && current_ && current_->on_board) {
        settle_board();
      }
      return;
    }
    case FrameType::status_request: {
      StatusReply reply;
      reply.issued_seq = issued_seq_.load();
      reply.running_seq = current_ ? current_->call.seq : 0;
      transport_->send_control(ev.peer, FrameType::status_reply, encode(reply));
      return;
    }
    case FrameType::status_reply:
      if (probe_) {
        probe_->replies[static_cast<std::size_t>(ev.peer)] = decode_status(ev.payload);
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
  const Deadline liveness = earliest(earliest(liveness_deadline(), held_until_),
                                     executor_ ? headers_until_ : Deadline::never());
  if (probe_) {
    return earliest(probe_->until, liveness);
  }
  return deadlines_.empty() ? liveness : earliest(liveness, Deadline::at(*deadlines_.begin()));
}

Deadline Engine::liveness_deadline() const {
  if (config_.peer_timeout <= Duration::zero()) {
    return Deadline::never();
  }
  return Deadline::at(std::min(next_heartbeat_, next_silence_check_));
}

void Engine::tend_liveness() {
  if (failure_ || config_.peer_timeout <= Duration::zero()) {
    return;
  }
  const Clock::time_point now = Clock::now();
  if (now >= next_heartbeat_) {
    for (int p = 0; p < config_.size; ++p) {
      if (p != config_.rank && transport_->peer_connected(p)) {
        transport_->send_control(p, FrameType::heartbeat, {});
      }
    }
    next_heartbeat_ = now + config_.peer_timeout / 4;
  }
  // The peers are scanned only when the earliest of them could have gone silent: last-heard
  // times only move forward, so no peer passes the timeout before next_silence_check_.
  if (now < next_silence_check_) {
    return;
  }
  Clock::time_point earliest_silence = now + config_.peer_timeout;
  for (int p = 0; p < config_.size; ++p) {
    if (p == config_.rank) {
      continue;
    }
    const auto heard = transport_->last_heard(p);
    if (!heard) {
      continue;
    }
    if (now - *heard <= config_.peer_timeout) {
      earliest_silence = std::min(earliest_silence, *heard + config_.peer_timeout);
      continue;
    }
    const auto silent = std::chrono::duration_cast<Duration>(now - *heard);
    const Op* op = current_.get();
    fail_group(
        make_error(
            ErrorCode::network,
            fmt::format(
                "{}: no traffic or heartbeat from {} for {} (peer timeout {}): its host is down, "
                "the network between the ranks is partitioned, or the process is stopped (a "
                "debugger, SIGSTOP); to pause ranks on purpose, raise CHORUS_PEER_TIMEOUT (or "
                "TcpGroupOptions::peer_timeout), or set it to 0 to turn liveness checks off",
                prefix(op), rank_name(p), format_duration(silent),
                format_duration(config_.peer_timeout)),
            context(op, {p})),
        true, p);
    return;
  }
  next_silence_check_ = earliest_silence + std::chrono::milliseconds(1);
}

void Engine::check_deadlines() {
  if (failure_) {
    return;
  }
  if (probe_) {
    bool all = true;
    for (std::size_t p = 0; p < probe_->asked.size(); ++p) {
      if (probe_->asked[p] && !probe_->replies[p]) {
        all = false;
      }
    }
    if (all || probe_->until.expired()) {
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
  Probe probe;
  probe.op = op;
  probe.until = Deadline::after(probe_grace(op->call.timeout));
  probe.replies.resize(static_cast<std::size_t>(config_.size));
  probe.asked.resize(static_cast<std::size_t>(config_.size), false);
  for (int p = 0; p < config_.size; ++p) {
    // A collective, or a recv from any rank, may wait for any peer.
    const bool relevant = op->kind == Op::Kind::collective || op->peer == kAnyPeer || p == op->peer;
    if (p != config_.rank && relevant && transport_->peer_connected(p)) {
      transport_->send_control(p, FrameType::status_request, encode_u64(op->call.seq));
      probe.asked[static_cast<std::size_t>(p)] = true;
    }
  }
  probe_ = std::move(probe);
  check_deadlines();
}

void Engine::conclude_probe() {
  Probe probe = std::move(*probe_);
  probe_.reset();
  const Op* op = probe.op;
  std::vector<int> direct;
  std::string waiting;
  if (op == current_.get() && op->on_board) {
    for (const auto& [peer, last] : config_.board->missing(op->sig.seq)) {
      direct.push_back(peer);
    }
    waiting = direct.empty() ? "" : " waiting for the small-op board entries of ";
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
  std::string details;
  for (std::size_t i = 0; i < direct.size(); ++i) {
    waiting += (i ? ", " : "") + rank_name(direct[i]);
  }
  for (int p : direct) {
    if (!transport_->peer_connected(p)) {
      // Its link was asked for when this op needed it, and any live process's link connector
      // answers at once, whatever its program is doing.
      details += fmt::format(
          "; {} has not completed a link with this rank: its process is stopped, hung or "
          "overloaded",
          rank_name(p));
    }
  }
  std::vector<int> culprits;
  const Duration grace = probe_grace(op->call.timeout);
  for (int p = 0; p < config_.size; ++p) {
    const auto up = static_cast<std::size_t>(p);
    if (!probe.asked[up]) {
      continue;
    }
    if (!probe.replies[up]) {
      culprits.push_back(p);
      details += fmt::format(
          "; {} did not answer a status probe within {}: it is stopped, hung or overloaded",
          rank_name(p), format_duration(grace));
    } else if (op->kind == Op::Kind::collective && probe.replies[up]->issued_seq < op->call.seq) {
      culprits.push_back(p);
      details += fmt::format("; {} has not issued this op yet (its last collective is seq {})",
                             rank_name(p), probe.replies[up]->issued_seq);
    }
  }
  if (culprits.empty()) {
    culprits = direct;
  }
  const std::string message = fmt::format(
      "{} timed out after {}{}{}; check the named ranks (log, stack), or raise the timeout "
      "(per-call option, GroupOptions::timeout or CHORUS_TIMEOUT) if the op is legitimately slow",
      prefix(op), format_duration(op->call.timeout), waiting, details);
  const int root = culprits.empty() ? config_.rank : culprits.front();
  fail_group(make_error(ErrorCode::timeout, message, context(op, culprits)), true, root);
}

void Engine::fail_from_news(int from, const AbortNotice& n, bool left) {
  const Op* op = current_.get();
  const int root = valid_rank(n.root_rank) ? n.root_rank : from;
  const std::string& root_message =
      valid_rank(n.root_rank) && !n.root_message.empty() ? n.root_message : n.message;
  const std::string how = left ? "left the group" : "aborted the group";
  std::string what;
  if (root == from || root == config_.rank) {
    // The sender is the root, or this rank is (its own timeout culprit): the sender's words.
    what = fmt::format("{} failed and {}: {}", rank_name(from), how, n.message);
  } else {
    what = fmt::format("the group failed because of {}: {}; {} {} because of it", rank_name(root),
                       root_message, rank_name(from), how);
  }
  std::vector<int> peers = n.peers;
  if (std::find(peers.begin(), peers.end(), root) == peers.end()) {
    peers.insert(peers.begin(), root);
  }
  const int code = n.code;
  const auto error_code = code >= static_cast<int>(ErrorCode::invalid_argument) &&
                                  code <= static_cast<int>(ErrorCode::internal)
                              ? static_cast<ErrorCode>(code)
                              : ErrorCode::network;
  // Pass the news on: links are made on demand, so the peers linked to this rank may have no
  // link to the sender (and a goodbye went only here anyway). A rank that already failed
  // ignores it, so the news crosses every link once; neither the sender nor the root needs it.
  fail_group(make_error(error_code, fmt::format("{}: {}", prefix(op), what),
                        context(op, std::move(peers))),
             true, root, root_message, from);
}

void Engine::fail_group(std::exception_ptr error, bool notify_peers, int root_rank,
                        std::string root_message, int news_from) {
  if (failure_) {
    return;
  }
  failure_ = error;
  {
    std::lock_guard lock(mu_);
    failed_ = error;
    has_failed_.store(true, std::memory_order_release);
  }
  if (config_.on_failure) {
    config_.on_failure(error);
  }
  AbortNotice notice;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    notice.code = static_cast<int>(e.code());
    notice.seq = e.context().seq;
    notice.peers = e.context().peers;
    notice.message = e.what();
  } catch (const std::exception& e) {
    notice.code = static_cast<int>(ErrorCode::internal);
    notice.message = e.what();
  }
  notice.root_rank = valid_rank(root_rank) ? root_rank : config_.rank;
  notice.root_message = root_message.empty() ? notice.message : std::move(root_message);
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
  if (current_) {
    failed.push_back(std::move(current_));
  }
  executor_.reset();
  schedule_.reset();
  arena_.reset();
  probe_.reset();
  for (auto& op : queue_) {
    failed.push_back(std::move(op));
  }
  queue_.clear();
  for (auto& [token, op] : p2p_) {
    failed.push_back(std::move(op));
  }
  p2p_.clear();
  deadlines_.clear();
  {
    std::lock_guard lock(mu_);
    for (auto& op : submitted_) {
      failed.push_back(std::move(op));
    }
    submitted_.clear();
  }
  for (auto& op : failed) {
    op->work->complete(error);
  }
}

void Engine::shutdown() {
  std::exception_ptr gone = failure_;
  if (!gone) {
    gone = make_error(
        ErrorCode::aborted,
        fmt::format("{}: the group was destroyed while this op was pending", prefix(nullptr)),
        context(nullptr, {}));
  }
  // Pending ops fail and their buffers are released; peers hear a goodbye, not an abort:
  // they fail only if they still needed this rank.
  std::vector<std::unique_ptr<Op>> pending;
  if (current_) {
    pending.push_back(std::move(current_));
  }
  executor_.reset();
  schedule_.reset();
  for (auto& op : queue_) {
    pending.push_back(std::move(op));
  }
  queue_.clear();
  for (auto& [token, op] : p2p_) {
    pending.push_back(std::move(op));
  }
  p2p_.clear();
  deadlines_.clear();
  {
    std::lock_guard lock(mu_);
    for (auto& op : submitted_) {
      pending.push_back(std::move(op));
    }
    submitted_.clear();
  }
  transport_->drop_all();
  for (auto& op : pending) {
    op->work->complete(gone);
  }
  // The goodbye of a failed group carries its root cause: a peer that hears of this rank
  // leaving before it hears of the failure still names the rank where it began.
  Goodbye bye;
  bye.last_seq = issued_seq_.load();
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
  {
    std::lock_guard lock(mu_);
    abort_done_ = true;
  }
  cv_.notify_all();
}

}  // namespace chorus::tcp
