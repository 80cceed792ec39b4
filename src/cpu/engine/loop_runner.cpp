// SPDX-License-Identifier: BSD-3-Clause
// LoopRunner: hands the engine's loop between the engine thread and driving callers (see
// loop_runner.hpp for the protocol and what guards what). What one turn of the loop does is
// the Engine's (engine.cpp).
#include "cpu/engine/loop_runner.hpp"

#include <algorithm>
#include <utility>

#include "core/futex.hpp"
#include "core/logging.hpp"

namespace chorus::cpu {

LoopRunner::LoopRunner(Loop& loop) : loop_(loop), gate_(std::make_shared<Gate>(this)) {}

LoopRunner::~LoopRunner() = default;

void LoopRunner::start(std::string thread_context) {
  thread_ = std::thread([this, context = std::move(thread_context)] {
    log::set_thread_context(context);
    run();
  });
}

void LoopRunner::stop() noexcept {
  stopping_.store(true);
  poke();          // a driver in poll() returns and sees stopping_
  gate_->close();  // no new driver; waits for the ones inside
  if (thread_.joinable()) {
    thread_.join();
  }
}

void LoopRunner::run() noexcept {
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
      loop_.turn(false, nullptr);
      // Work that no caller drives needs the engine thread's own loop.
      parked = Clock::now() - last_drive_end_ < kParkKeep && !loop_.holds_work();
      const std::uint64_t drives = std::exchange(drives_seen, drives_.load());
      tick = parked && drives != drives_seen ? std::min(2 * tick, kParkTickBusy) : kParkTick;
      continue;
    }
    loop_.turn(true, nullptr);
  }
  if (!lease.owns_lock()) {
    lease.lock();  // drivers give the loop back once stopping_ is set
  }
  runner_.store(std::this_thread::get_id());
  loop_.finish();
}

void LoopRunner::park(std::chrono::milliseconds tick) noexcept {
  const std::uint32_t seq = park_seq_.load();
  parked_.store(true);
  // A poke() made before the load above set poked_ first; one made after it changed the word.
  if (!poked_.exchange(false) && !stopping_.load()) {
    futex_wait(park_seq_, seq, tick);
  }
  parked_.store(false);
  poked_.store(false);
}

void LoopRunner::poke() noexcept {
  poked_.store(true);
  park_seq_.fetch_add(1);
  if (parked_.load()) {
    futex_wake(park_seq_);
  }
  loop_.end_poll();
}

void LoopRunner::Gate::drive(const WorkState& work) noexcept {
  LoopRunner* runner = nullptr;
  {
    std::lock_guard lock(mu_);
    runner = runner_;
    if (runner == nullptr) {
      return;
    }
    ++inside_;
  }
  runner->drive(work);
  {
    std::lock_guard lock(mu_);
    --inside_;
  }
  cv_.notify_all();
}

void LoopRunner::Gate::close() noexcept {
  // Not bounded by a deadline, like the join after it: the engine cannot go while a driver
  // still runs its loop. Each driver returns within one poll of the poke() that follows
  // stopping_ (stop() makes both before it closes the gate).
  std::unique_lock lock(mu_);
  runner_ = nullptr;
  cv_.wait(lock, [&] { return inside_ == 0; });
}

void LoopRunner::drive(const WorkState& work) noexcept {
  const std::thread::id me = std::this_thread::get_id();
  if (me == thread_.get_id() || runner_.load() == me) {
    return;
  }
  drivers_waiting_.fetch_add(1);
  loop_.end_poll();  // the engine thread leaves its poll and parks
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
    loop_.turn(true, &work);
  }
  const Clock::time_point end = Clock::now();
  last_drive_end_ = end;
  runner_.store(std::thread::id());
  lease.unlock();
  if (end - start > kParkTick) {
    poke();  // the engine thread may have slowed its looks meanwhile
  }
}

}  // namespace chorus::cpu
