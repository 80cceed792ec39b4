// SPDX-License-Identifier: BSD-3-Clause
// Engine: the progress loop of one CpuProcessGroup, and the thread that runs it.
//
// User threads submit() ops and wait on their Work. The engine thread owns the transport, the
// event loop and every op (a caller waiting for a small op may run the loop for it meanwhile:
// caller-driven progress, loop_runner.hpp): it runs collectives one at a time in issue order
// (tagged send/recv run alongside, they never block the collective queue), sleeps in
// epoll_wait until the nearest deadline (with a small collective in flight or just finished,
// after looking for up to kSpin without sleeping), and is woken through the loop's eventfd on
// submit, abort and shutdown.
//
// Liveness: the engine sends heartbeats and watches when each peer was last heard (any data or
// frame), idle or not, so a peer that goes silent without a reset (host down, partition,
// stopped process) is named within the peer timeout rather than at an op's deadline.
//
// Failure model: the first failure poisons the group. A timeout first probes the peers
// (status request on the control channel, bounded grace period) so the error can name the
// rank that is really stuck: the one that does not answer, or that has not issued the op.
// Then, for any failure (timeout, dead peer, mismatched signatures, abort()), every pending
// op fails with the same error, the transport drops all posted buffers, and an abort notice
// tells every peer, so all ranks fail at once with the original cause. Notices and the
// goodbye of a failed group carry the root cause (the rank where the failure began), so a
// survivor names that rank whatever order the news reaches it in.
//
// The engine receives its transport (EngineTransport, built by transport_stack.hpp in
// production, by tests from their own tables) and knows only the seam: transport.hpp and the
// capabilities it offers (small_ops.hpp), never which transport it runs on.
//
// Two concurrency protocols, each in its own class with its invariants at its top: SubmitQueue
// (submit_queue.hpp: what user threads hand to the loop, the failure they see) and LoopRunner
// (loop_runner.hpp: who runs the loop, the engine thread or a driving caller). Everything else
// in Engine is the loop's own state, touched only by the thread running the loop now, or set
// before the loop starts and constant after; run_small_op(), on the issuing caller's thread,
// touches only the SmallOps capability (safe across threads by its contract) and SubmitQueue.
//
// Where things are: engine.cpp runs ops (submit, one turn of the loop, the op queue, events);
// engine_small_ops.cpp runs ops through the transport's SmallOps capability; engine_failure.cpp
// ends ops that do not complete (deadlines, probes, fail_group, news, shutdown). Pieces with their
// own state: FailureReport (the wording of every failure), StatusProbe (the probe of a timed-out
// op), Liveness (heartbeats, silent peers).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <chorus/errors.hpp>

#include "cpu/engine/executor.hpp"
#include "cpu/engine/failure_report.hpp"
#include "cpu/engine/liveness.hpp"
#include "cpu/engine/loop_runner.hpp"
#include "cpu/engine/op.hpp"
#include "cpu/engine/status_probe.hpp"
#include "cpu/engine/submit_queue.hpp"
#include "cpu/plan/schedule.hpp"
#include "cpu/transports/small_ops.hpp"
#include "cpu/transports/transport.hpp"
#include "cpu/transports/wire.hpp"

namespace chorus::cpu {

struct EngineConfig {
  int rank = 0;
  int size = 1;
  std::string group;
  // Called by the loop (the engine thread or a driving caller: loop_runner.hpp) with the first
  // failure (the group records it for fast-fail).
  std::function<void(std::exception_ptr)> on_failure;
  // Called by the loop when a collective starts running, with its algorithm (the
  // group's flight recorder notes both), and again when an op built in two phases starts its
  // second, with the algorithm the first one chose.
  std::function<void(const OpCall&, const char* algorithm)> on_start;
  // Peer liveness (see TcpGroupOptions::peer_timeout): heartbeats to every peer four times per
  // peer_timeout, and a peer not heard from for peer_timeout fails the group naming it.
  // Zero: off.
  Duration peer_timeout = Duration::zero();
};

class Engine final : private LoopRunner::Loop {
 public:
  Engine(EngineConfig config, std::unique_ptr<EngineTransport> transport);
  ~Engine();  // fails pending ops, says goodbye to the peers, joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread. The op's Work completes in the loop (or here, if the group failed).
  void submit(std::unique_ptr<Op> op);
  // The transport's small-op capability (EngineTransport::small_ops()), or null: ops for which
  // runs_small() says so run through it, and every other collective announces itself there.
  const SmallOps* small_ops() const noexcept { return small_ops_; }
  // Whether collective `op` (its args, sig and bytes set) runs through small_ops(): the same
  // answer on every rank. Not when CHORUS_ALGO forces an algorithm for it.
  bool runs_small(const Op& op) const noexcept {
    return small_ops_ != nullptr && op.args.forced == AlgorithmId::automatic &&
           small_ops_->takes(op.sig, op.bytes);
  }
  // The caller's thread, for an Op::via_small_ops op, when no collective is queued or running
  // on the engine and none can be submitted meanwhile (the caller holds the group's issue
  // order): runs it here, through small_ops(), and returns true: done, or (`error` set) the
  // group had failed. The op needs no Work for that. One whose peers are late (kInlineWait), or
  // that meets a mismatch, returns false, published: the caller gives it its Work and
  // submit()s it, and the engine waits on, or probes the peers and names them as for any op.
  bool run_small_op(Op& op, std::exception_ptr& error);
  // Whether the calling thread runs the engine's loop now (the engine thread, or a caller in
  // drive()): a Work callback issuing an op.
  bool on_engine_thread() const noexcept { return runner_.on_loop_thread(); }
  // For WorkState::drive_with(): the Works of small collectives lend their waiting thread to
  // the loop (caller-driven progress: loop_runner.hpp).
  std::shared_ptr<WorkDriver> driver() const { return runner_.driver(); }
  // Whether a caller (not the engine thread) runs the loop now (for tests).
  bool caller_driving() const noexcept { return runner_.caller_driving(); }
  // Any thread: fail everything with `error` (unless the group already failed) and notify
  // the peers. Returns once the engine has dropped every user buffer (bounded: the engine
  // never blocks for long), or at once when called on the engine thread.
  void abort(std::exception_ptr error);

  const std::string& local_address() const { return local_address_; }

 private:
  // LoopRunner::Loop, run by whoever holds the loop (loop_runner.hpp).
  // One turn of the loop: takes submitted ops, starts the next, polls the transport (with
  // `wait`, until something happens or the nearest deadline; not once `driven`, the Work a
  // driving caller waits for, is complete) and settles what happened.
  void turn(bool wait, const WorkState* driven) override;
  bool holds_work() const noexcept override;
  void end_poll() noexcept override { transport_->wakeup(); }
  void finish() override { shutdown(); }

  // kHeaderHold passed: the current op's held signature headers go alone.
  void release_held_headers();
  void take_submitted();
  void start_next();
  // The current op's schedule and executor, built in the spare pair's memory where there is one.
  void build_run(const Op& op);
  // The current op finished: its schedule and executor become the spare pair.
  void recycle_run() noexcept;
  void track_deadline(const Op& op);
  void untrack_deadline(const Op& op);
  void finish_current(std::exception_ptr error);
  // The current op runs through small_ops(): finishes it if every rank has published, fails the
  // group on a mismatch or when a rank it waits for left.
  void settle_small_op();
  void on_completion(std::uint64_t token);
  // After the current executor ran: finishes the op if it is done, fails the group if it failed
  // (a failed call task only after kLocalFailureGrace: see held_failure_).
  void settle_current();
  // The current op's first phase is done and it has a second (Schedule::then()): builds and
  // starts it.
  void start_continuation(Schedule::Continuation next);
  // Fails the group with the held call failure once its grace has passed.
  void check_held_failure();
  void on_event(TransportEvent& ev);
  // A tagged send or recv completed (ev.token names it), or failed alone (ev.error).
  void finish_p2p(const TransportEvent& ev);
  void on_control(TransportEvent& ev);
  void on_abort_notice(const TransportEvent& ev);
  void on_goodbye(const TransportEvent& ev);
  void check_deadlines();
  // Sends due heartbeats; fails the group if a peer has been silent past the peer timeout.
  void tend_liveness();
  void start_probe(Op* op);
  void conclude_probe();
  // root_rank: where the failure began (this rank, a dead peer, a timeout's culprit, or the
  // root named by a peer's notice); root_message: what that rank said (empty: this error's).
  // notify_peers: send the abort notice to every linked peer except `news_from` (the peer
  // whose news this is) and the root rank.
  void fail_group(std::exception_ptr error, bool notify_peers, int root_rank,
                  std::string root_message = {}, int news_from = -1);
  // A peer's abort notice, or the cause in its goodbye: fail naming the root cause.
  void fail_from_news(int from, const AbortNotice& notice, bool left);
  // Moves every op not yet complete (current, queued, tagged, submitted) into `into` and drops
  // the current op's schedule and executor: fail_group() and shutdown() then complete them.
  void take_pending(std::vector<std::unique_ptr<Op>>& into);
  Deadline nearest_deadline() const;
  void shutdown();

  EngineConfig config_;
  std::unique_ptr<EngineTransport> transport_;
  SmallOps* small_ops_;  // transport_->small_ops(), asked once (the caller's thread uses it too)
  std::string local_address_;
  FailureReport report_;  // the wording of every failure (engine thread)
  Liveness liveness_;     // heartbeats and the silent-peer watch (loop)

  SubmitQueue submitted_;  // user threads -> the loop (its own lock; submit_queue.hpp)

  // The loop's: touched only by the thread running the loop (loop_runner.hpp).
  std::deque<std::unique_ptr<Op>> queue_;
  std::unique_ptr<Op> current_;
  std::unique_ptr<Schedule> schedule_;
  std::unique_ptr<Executor> executor_;
  // The last finished op's schedule and executor (bound to that schedule), emptied for the next
  // op: a small op then builds and runs without touching the heap (recycle_run()).
  std::unique_ptr<Schedule> spare_schedule_;
  std::unique_ptr<Executor> spare_executor_;
  // take_submitted()'s batch memory, empty between calls: an empty vector holds no memory, so
  // it and the queue's swap back and forth without allocating (a std::deque would allocate).
  std::vector<std::unique_ptr<Op>> taken_;
  ScratchArena arena_;
  std::uint64_t epoch_ = 0;
  std::unordered_map<std::uint64_t, std::unique_ptr<Op>> p2p_;
  // The deadlines of every op in queue_, current_ and p2p_ (one entry each, never-deadlines
  // left out): the nearest is begin(), so thousands of queued ops cost no scan per loop.
  std::multiset<Clock::time_point> deadlines_;
  std::uint64_t next_p2p_token_ = 1;
  std::optional<StatusProbe> probe_;
  // A call task that failed because of a peer (e.g. a single-copy read found the peer's process
  // gone). The peer's own news (its abort notice: why it exited; or its sockets closing) follows
  // within milliseconds and names the root cause better, so the failure waits for it, at most
  // kLocalFailureGrace, before it is raised as is.
  static constexpr Duration kLocalFailureGrace = std::chrono::milliseconds(500);
  // run_small_op() waits this long for late peers before it hands the op to the engine (it
  // holds the issue lock meanwhile); long enough to ride out a peer off its core for a slice.
  static constexpr Duration kInlineWait = std::chrono::milliseconds(5);
  // The executor holds a signature header until the first data send behind it is ready, so
  // they leave in one write (Executor::start); after this long it sends the held ones alone,
  // so a mismatched op is still found within about this (a rank whose sends wait for data a
  // mismatched peer never sends would otherwise show the peer nothing until the deadline).
  // Measured on 2 cores, 8 B allreduce, 4 ranks over loopback tcp, waiting for each op: 65
  // against 54 us (docs/results.md, "Small ops over loopback tcp: headers held for their data").
  static constexpr Duration kHeaderHold = std::chrono::milliseconds(1);
  // A collective of up to kSpinMaxBytes in flight: the transport looks for its data for up to
  // kSpin before it sleeps (PollHint::spin). Measured on 2 cores over
  // loopback tcp (with Work::wait's own looking): an 8 B allreduce 3.4x faster at 2 ranks and
  // 2x at 4, 1 MiB 1.35x at 2 ranks; no change at 64 MiB. Over shared memory at 4 ranks: 8 and
  // 16 MiB 1.1-1.2x faster (16 MiB over tcp: no change); 64 MiB slightly slower, so the bound.
  static constexpr std::size_t kSpinMaxBytes = std::size_t{16} << 20;
  static constexpr std::chrono::microseconds kSpin{50};
  // kSpin while a small collective is in flight; after one finished, with nothing queued, the
  // rest of kSpin from its end (a caller that waits for each op issues the next within
  // microseconds, and its submit then finds the engine awake).
  std::chrono::microseconds spin_budget() const;
  Clock::time_point linger_until_{};  // a small collective finished kSpin before this
  std::optional<LocalFailure> held_failure_;
  Deadline held_until_ = Deadline::never();
  // When the current op's held signature headers go alone (kHeaderHold); never when none.
  Deadline headers_until_ = Deadline::never();
  std::exception_ptr failure_;  // engine's copy of the first failure
  AbortNotice failure_notice_;  // the same, as told to peers (in abort notices and goodbyes)
  std::vector<std::uint64_t> completed_;
  std::vector<TransportEvent> events_;
  std::vector<bool> left_;  // by rank: said goodbye (a small op it never published fails)

  // Last: its thread runs the loop over every member above (the destructor stops it first).
  LoopRunner runner_{*this};
};

}  // namespace chorus::cpu
