// SPDX-License-Identifier: BSD-3-Clause
#include "core/callback_thread.hpp"

#include <cxxabi.h>
#include <pthread.h>

#include <exception>
#include <system_error>
#include <utility>

#include "core/format.hpp"
#include "core/logging.hpp"

namespace chorus {
namespace {

// Not noexcept, and lets abi::__forced_unwind through: a Python callback that asks for the GIL
// after the interpreter began to finalize ends its thread with pthread_exit, whose unwinding
// would call std::terminate at a noexcept frame (and abort the process at exit).
void run_task(std::function<void()>& task) {
  try {
    task();
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (const std::exception& e) {
    CHORUS_WARN(coll, "a Work callback threw and was ignored: {}", e.what());
  } catch (...) {
    CHORUS_WARN(coll, "a Work callback threw and was ignored");
  }
  // Destroyed here, on the thread that ran it: what the task held (a torch tensor whose
  // release needs the GIL) is let go of on this thread too.
  task = nullptr;
}

}  // namespace

CallbackThread::CallbackThread(std::string name) : name_(std::move(name)) {}

CallbackThread::~CallbackThread() { close(kCloseBound); }

void CallbackThread::post(std::function<void()> task) noexcept {
  {
    std::lock_guard lock(queue_->mu);
    if (!queue_->closed) {
      try {
        if (!thread_.joinable()) {
          thread_ = std::thread(run, queue_, name_);
        }
        queue_->tasks.push_back(std::move(task));
      } catch (const std::exception& e) {
        // No thread (or no memory for the queue): the callback runs on the posting thread, as
        // it would without a callback thread.
        CHORUS_WARN(coll,
                    "{}: cannot hand a Work callback to the callback thread ({}); it runs "
                    "on the completing thread",
                    name_, e.what());
      }
    }
  }
  if (task) {
    run_task(task);
    return;
  }
  queue_->cv.notify_one();
}

void CallbackThread::run(const std::shared_ptr<Queue>& queue, const std::string& name) {
  log::set_thread_context(name + " callbacks");
  pthread_setname_np(pthread_self(), "chorus-callback");
  std::unique_lock lock(queue->mu);
  for (;;) {
    queue->cv.wait(lock, [&] { return !queue->tasks.empty() || queue->closed; });
    if (queue->tasks.empty()) {
      break;  // closed, and nothing left
    }
    std::function<void()> task = std::move(queue->tasks.front());
    queue->tasks.pop_front();
    lock.unlock();
    run_task(task);
    lock.lock();
  }
  queue->ended = true;
  queue->cv.notify_all();
}

void CallbackThread::close(Duration bound) noexcept {
  std::unique_lock lock(queue_->mu);
  queue_->closed = true;
  queue_->cv.notify_all();
  if (!thread_.joinable()) {
    return;
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last owner let go inside a callback: the thread ends by itself
    return;
  }
  if (queue_->cv.wait_for(lock, bound, [&] { return queue_->ended; })) {
    std::thread ended = std::move(thread_);
    lock.unlock();
    ended.join();  // returns at once: the thread has left its loop
    return;
  }
  CHORUS_WARN(coll,
              "{}: a Work callback is still running {} after the group was destroyed ({} more "
              "queued); they finish on their own thread. A callback that blocks (waits for the "
              "GIL held by the thread destroying the group, for input, for another process) "
              "keeps that thread",
              name_, format_duration(bound), queue_->tasks.size());
  thread_.detach();
}

}  // namespace chorus
