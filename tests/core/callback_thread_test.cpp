// SPDX-License-Identifier: BSD-3-Clause
// CallbackThread and WorkState together: then() callbacks of a Work completed by a backend's
// thread run on the group's callback thread, in completion order; they may block and wait on
// other Works; close() lets queued callbacks finish, bounded; later posts run inline.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/callback_thread.hpp"
#include "core/work_state.hpp"

using namespace chorus;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<WorkState> work_on(const std::shared_ptr<CallbackThread>& callbacks,
                                   std::uint64_t seq) {
  auto work = std::make_shared<WorkState>("allreduce", seq);
  work->run_callbacks_on(callbacks);
  return work;
}

// A latch the test opens; waits are bounded so that a bug fails instead of hanging.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  bool wait(std::chrono::milliseconds bound) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, bound, [&] { return open; });
  }
};

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds bound = 10s) {
  const Deadline deadline = Deadline::after(bound);
  while (!pred()) {
    if (deadline.expired()) {
      return false;
    }
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

TEST_CASE("callbacks run on the callback thread, in completion order, not the completer's",
          "[core]") {
  auto callbacks = std::make_shared<CallbackThread>("test");
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::vector<std::shared_ptr<WorkState>> works;
  for (int i = 0; i < 5; ++i) {
    works.push_back(work_on(callbacks, static_cast<std::uint64_t>(i + 1)));
    works.back()->then([&, i](Work&) {
      std::lock_guard lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  for (int i : {3, 0, 4, 1, 2}) {
    works[static_cast<std::size_t>(i)]->complete();
  }
  REQUIRE(eventually([&] {
    std::lock_guard lock(mu);
    return order.size() == 5;
  }));
  CHECK(order == std::vector<int>{3, 0, 4, 1, 2});
  for (const auto& id : threads) {
    CHECK(id != std::this_thread::get_id());
    CHECK(id == threads.front());
  }
  // Done already: inline, on the caller.
  std::thread::id inline_thread;
  works[0]->then([&](Work&) { inline_thread = std::this_thread::get_id(); });
  CHECK(inline_thread == std::this_thread::get_id());
}

TEST_CASE("a blocked callback delays only the callbacks behind it; it may wait on another Work",
          "[core]") {
  auto callbacks = std::make_shared<CallbackThread>("test");
  auto first = work_on(callbacks, 1);
  auto second = work_on(callbacks, 2);
  std::atomic<bool> waited{false};
  std::atomic<bool> behind{false};
  first->then([&](Work&) {
    second->wait();  // completed later by the test thread: no deadlock, no InvalidArgument
    waited = true;
  });
  second->then([&](Work&) { behind = true; });
  first->complete();  // returns at once although its callback blocks
  CHECK_FALSE(waited.load());
  second->complete();
  REQUIRE(eventually([&] { return waited.load() && behind.load(); }));
}

TEST_CASE("close() runs what is queued; later callbacks run on the completing thread", "[core]") {
  auto callbacks = std::make_shared<CallbackThread>("test");
  Gate gate;
  auto blocked = work_on(callbacks, 1);
  auto queued = work_on(callbacks, 2);
  std::atomic<bool> queued_ran{false};
  std::atomic<bool> opened{false};  // Catch2 assertions stay on the test's thread
  blocked->then([&](Work&) { opened = gate.wait(10s); });
  queued->then([&](Work&) { queued_ran = true; });
  blocked->complete();
  queued->complete();
  std::thread opener([&] {
    std::this_thread::sleep_for(50ms);  // close() must wait for the blocked callback meanwhile
    gate.release();
  });
  callbacks->close(10s);
  opener.join();
  CHECK(opened.load());
  CHECK(queued_ran.load());
  auto late = work_on(callbacks, 3);
  std::thread::id late_thread;
  late->then([&](Work&) { late_thread = std::this_thread::get_id(); });
  late->complete();
  CHECK(late_thread == std::this_thread::get_id());
}

TEST_CASE("close() gives up on a callback that blocks past its bound; it finishes on its own",
          "[core]") {
  Gate gate;
  std::atomic<bool> finished{false};
  {
    auto callbacks = std::make_shared<CallbackThread>("test");
    auto work = work_on(callbacks, 1);
    work->then([&](Work&) { finished = gate.wait(10s); });
    work->complete();
    const auto t0 = Clock::now();
    callbacks->close(100ms);
    CHECK(Clock::now() - t0 < 5s);
    CHECK_FALSE(finished.load());
  }
  gate.release();
  REQUIRE(eventually([&] { return finished.load(); }));
}

TEST_CASE("the last owner of the callback thread may let go inside a callback", "[core]") {
  std::atomic<bool> done{false};
  auto callbacks = std::make_shared<CallbackThread>("test");
  auto work = work_on(callbacks, 1);
  // The Work holds the only other reference; the callback drops it on the callback thread.
  work->then([&done, keep = std::move(callbacks)](Work&) mutable {
    keep.reset();
    done = true;
  });
  work->complete();
  work.reset();
  REQUIRE(eventually([&] { return done.load(); }));
}

TEST_CASE("wait() returns when the op is done, never after its callbacks", "[core]") {
  // A callback that waits for what the waiting thread does after wait() (here: open the
  // gate) must not run on that thread: it would wait for itself.
  auto callbacks = std::make_shared<CallbackThread>("test");
  for (int round = 0; round < 50; ++round) {
    auto work = work_on(callbacks, static_cast<std::uint64_t>(round + 1));
    Gate gate;
    std::atomic<bool> opened{false};
    std::atomic<bool> finished{false};
    work->then([&](Work&) {
      opened = gate.wait(2s);
      finished = true;
    });
    std::thread completer([&] { work->complete(); });
    work->wait();
    const bool before_callback = !finished.load();
    gate.release();
    completer.join();
    REQUIRE(eventually([&] { return finished.load(); }));
    REQUIRE(before_callback);
    REQUIRE(opened.load());
  }
}
