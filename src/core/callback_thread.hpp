// SPDX-License-Identifier: BSD-3-Clause
// CallbackThread: where a group's Works run their then() callbacks, so that no user code ever
// runs on the thread that keeps the group alive (the tcp engine, which sends heartbeats and
// detects dead peers; the nccl watchdog, which enforces deadlines). A callback that blocks (a
// Python callback waiting for the GIL, a comm hook that sleeps, a breakpoint) delays only the
// callbacks queued behind it, never liveness or other ops.
//
// One thread per group, started by the first callback (most groups never need one); callbacks
// run one at a time in the order their Works completed. close() (the backend going away) lets
// the thread run what is queued and end; later posts run on the posting thread.
#pragma once

#include "core/private.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <chorus/deadline.hpp>

namespace chorus {

class CallbackThread {
 public:
  // `name`: the group's, for the thread's log context.
  explicit CallbackThread(std::string name);
  ~CallbackThread();  // close(kCloseBound)
  CallbackThread(const CallbackThread&) = delete;
  CallbackThread& operator=(const CallbackThread&) = delete;

  // Any thread: runs `task` on the callback thread, after the tasks posted before it. Once
  // closed (or if no thread can be started), runs it here.
  void post(std::function<void()> task) noexcept;

  // No more tasks are queued; the thread runs those it has and ends. Waits up to `bound` for
  // that (callbacks still running past it, e.g. a Python callback waiting for the GIL held by
  // the thread that destroys the group, are left to finish on their own, with a warning).
  // Called from a callback of this thread itself, does not wait.
  void close(Duration bound) noexcept;

  // How long close() from the destructor waits.
  static constexpr Duration kCloseBound = std::chrono::seconds(2);

 private:
  // Shared with the thread, which may outlive this object (detached by close()).
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;  // guarded by mu
    bool closed = false;                      // guarded by mu
    bool ended = false;                       // guarded by mu: the thread has run its last task
  };
  // Not noexcept: see run_task() in the .cpp (a thread ended by pthread_exit unwinds through it).
  static void run(const std::shared_ptr<Queue>& queue, const std::string& name);

  const std::string name_;
  const std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::thread thread_;  // guarded by queue_->mu; started by the first post()
};

}  // namespace chorus
