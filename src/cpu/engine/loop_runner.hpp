// SPDX-License-Identifier: BSD-3-Clause
// LoopRunner: who runs the engine's loop, and when: the engine thread it owns, or a caller
// waiting for a small op's Work (caller-driven progress). One of the engine's two concurrency
// protocols; the other, what user threads hand to the loop, is SubmitQueue's
// (submit_queue.hpp). The runner knows nothing of ops: it calls its Loop (the Engine).
//
// Why callers drive: a caller that runs the loop while it waits saves the hand-offs between its
// thread and the engine's (a submit's wake-up, the completion's), and the engine thread stays
// off the cores meanwhile: with 4 ranks on 2 cores that is half the runnable threads.
//
// The protocol. One thread at a time runs the loop: whoever holds lease_. The engine thread
// holds it by default; a caller in drive() announces itself in drivers_waiting_ and ends the
// loop's poll (Loop::end_poll()); the engine thread then lets go of the lease and parks. Parked,
// it looks in once per kParkTick (heartbeats, news, ops nobody waits on): less often during one
// long drive (a wait for a late peer, which pokes it at its end), up to kParkTickMax, or while
// callers drive op after op and its looks find nothing to do, up to kParkTickBusy; it goes back
// to its own loop kParkKeep after the last drive, or at once when the loop holds work no caller
// drives (Loop::holds_work()). Ops without a driver, abort() and stop() unpark it (poke()).
// A second caller that finds the loop taken by another caller waits for its Work instead.
//
// Who calls what: any thread: poke(), on_loop_thread(), caller_driving(), driver(); the Works of
// small ops (through the Gate): drive(); the engine's constructor: start(); its destructor:
// stop(). Loop::turn() and Loop::finish() run only on the lease holder's thread.
//
// What guards what:
// - lease_ (a mutex held across turns, never waited on by a caller: try_lock only) is the right
//   to run the loop; runner_ names its holder (none while it is handed over) and
//   last_drive_end_ is the holder's alone.
// - drivers_waiting_: callers that want the lease; the engine thread gives it up while > 0.
// - stopping_: stop() began; drivers give the lease back and the engine thread takes it for good
//   (Loop::finish()).
// - park_seq_, parked_, poked_: the engine thread's park (a futex on park_seq_). poke() sets
//   poked_ before it bumps park_seq_, and park() reads park_seq_ before it looks at poked_, so a
//   poke is never lost: one made before that read left poked_ set, one made after changed the
//   word the futex waits on.
// - drives_: drives begun, so the parked engine thread can tell a new drive from a long one.
// - Gate: its own mutex guards its engine pointer and count of callers inside drive(); stop()
//   closes it, so no Work outliving the engine calls into it (and waits for those inside).
// Every atomic uses the default (sequentially consistent) order.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <chorus/deadline.hpp>

#include "core/work_state.hpp"

namespace chorus::cpu {

class LoopRunner {
 public:
  // What the runner runs: the engine's loop.
  class Loop {
   public:
    // One turn of the loop: with `wait`, polls until something happens or the nearest deadline
    // (not once `driven`, the Work a driving caller waits for, is complete).
    virtual void turn(bool wait, const WorkState* driven) = 0;
    // Whether the loop holds work no caller drives (an op nobody may wait on, a tagged message,
    // a probe, a held failure): the engine thread must run its own loop for it.
    virtual bool holds_work() const noexcept = 0;
    // Any thread: ends the loop's poll now (a turn in progress returns soon).
    virtual void end_poll() noexcept = 0;
    // The engine thread, holding the lease for good after stop(): the loop's last act.
    virtual void finish() = 0;

   protected:
    ~Loop() = default;
  };

  explicit LoopRunner(Loop& loop);
  ~LoopRunner();  // stop() must have run
  LoopRunner(const LoopRunner&) = delete;
  LoopRunner& operator=(const LoopRunner&) = delete;

  // Starts the engine thread (named `thread_context` in the log). Once, when the loop is ready.
  void start(std::string thread_context);
  // Ends the loop: drivers give it back, no new one starts, the engine thread runs
  // Loop::finish() and is joined.
  void stop() noexcept;
  // Any thread: the engine thread must run its own loop soon (unparks it, ends a poll).
  void poke() noexcept;
  // Whether the calling thread runs the loop now (the engine thread, or a caller in drive()).
  bool on_loop_thread() const noexcept { return runner_.load() == std::this_thread::get_id(); }
  // Whether a caller (not the engine thread) runs the loop now.
  bool caller_driving() const noexcept {
    const std::thread::id runner = runner_.load();
    return runner != std::thread::id() && runner != thread_.get_id();
  }
  // For WorkState::drive_with(): the Works of small collectives lend their waiting thread.
  std::shared_ptr<WorkDriver> driver() const { return gate_; }

 private:
  // The driver the Works hold: it may outlive the runner, so it calls in only while open.
  class Gate final : public WorkDriver {
   public:
    explicit Gate(LoopRunner* runner) noexcept : runner_(runner) {}
    void drive(const WorkState& work) noexcept override;
    // The runner is going away: later drive() calls return at once; waits for those inside.
    void close() noexcept;

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    LoopRunner* runner_;  // guarded by mu_; null once closed
    int inside_ = 0;      // guarded by mu_
  };

  // The engine thread's body: runs the loop, or parks while callers drive it.
  void run() noexcept;
  // Runs the loop on the calling thread until `work` completes (or stop()); returns at once if
  // another caller drives (the caller then waits for its Work as usual).
  void drive(const WorkState& work) noexcept;
  // The engine thread, without the lease: sleeps until poke() or `tick` passes.
  void park(std::chrono::milliseconds tick) noexcept;

  Loop& loop_;
  std::shared_ptr<Gate> gate_;
  std::mutex lease_;
  std::atomic<std::thread::id> runner_{};  // the thread holding lease_ (none while handed over)
  std::atomic<int> drivers_waiting_{0};
  std::atomic<bool> stopping_{false};  // stop() began: drivers give the loop back
  std::atomic<std::uint32_t> park_seq_{0};
  std::atomic<bool> parked_{false};
  std::atomic<bool> poked_{false};
  Clock::time_point last_drive_end_{};    // lease holder only
  std::atomic<std::uint64_t> drives_{0};  // drives begun (the parked engine sees one go on)
  static constexpr std::chrono::milliseconds kParkTick{1};
  // A parked engine thread whose looks find the same drive still going doubles its tick, up to
  // this: a caller waiting 3 s for a late peer cost 2 % of a core in 1 ms looks.
  static constexpr std::chrono::milliseconds kParkTickMax{64};
  static constexpr std::chrono::milliseconds kParkKeep{2};
  // A parked engine thread whose looks find new drives each time (a caller waiting for op after
  // op) and nothing of its own to do doubles its tick up to this. Each look wakes a thread on a
  // core where a rank spins; at 1 ms, an 8-byte allreduce stream over loopback tcp at 2 ranks
  // made 840-890 futex calls and 2,700-3,700 context switches in 40,000 ops, at this bound
  // 270-280 and 1,100-2,400 (docs/results.md, "Small ops over loopback tcp: per-op work
  // and the parked engine's looks"). The price: a small op nobody waits on, issued just after
  // such a stream, starts up to this late.
  static constexpr std::chrono::milliseconds kParkTickBusy{4};

  std::thread thread_;
};

}  // namespace chorus::cpu
