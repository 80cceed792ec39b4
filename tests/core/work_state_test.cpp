// SPDX-License-Identifier: BSD-3-Clause
// WorkState: complete once, wait/wait_for, errors, then() callbacks, wait from a callback.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <chorus/errors.hpp>

#include "core/work_state.hpp"

using namespace chorus;
using namespace std::chrono_literals;

TEST_CASE("a Work completes once and wakes its waiter", "[core]") {
  auto work = std::make_shared<WorkState>("allreduce", 7);
  REQUIRE_FALSE(work->is_completed());
  REQUIRE_FALSE(work->wait_for(1ms));
  std::thread completer([&] { work->complete(); });
  work->wait();
  completer.join();
  REQUIRE(work->is_completed());
  REQUIRE(work->is_success());
  REQUIRE(work->exception() == nullptr);
  REQUIRE_FALSE(work->complete(std::make_exception_ptr(TimeoutError("late"))));
  REQUIRE(work->is_success());
  REQUIRE(work->seq() == 7);
  REQUIRE(std::string(work->op_name()) == "allreduce");
}

TEST_CASE("a failed Work rethrows its error from wait()", "[core]") {
  auto work = std::make_shared<WorkState>("barrier", 1);
  work->complete(std::make_exception_ptr(NetworkError("peer reset")));
  REQUIRE(work->wait_for(0ms));
  REQUIRE_FALSE(work->is_success());
  REQUIRE_THROWS_AS(work->wait(), NetworkError);
  REQUIRE(work->exception() != nullptr);
}

TEST_CASE("then() runs exactly once, on completion or inline", "[core]") {
  auto work = std::make_shared<WorkState>("broadcast", 3);
  std::atomic<int> calls{0};
  work->then([&](Work& w) {
    REQUIRE(w.is_completed());
    ++calls;
  });
  REQUIRE(calls == 0);
  work->complete();
  REQUIRE(calls == 1);
  work->then([&](Work&) { ++calls; });
  REQUIRE(calls == 2);
}

TEST_CASE("wait() on an unfinished op from a then() callback throws instead of deadlocking",
          "[core]") {
  auto first = std::make_shared<WorkState>("allreduce", 1);
  auto second = std::make_shared<WorkState>("allreduce", 2);
  bool threw = false;
  first->then([&](Work&) {
    try {
      second->wait();
    } catch (const InvalidArgument&) {
      threw = true;
    }
  });
  first->complete();
  REQUIRE(threw);
}

TEST_CASE("DoneWork::make reuses the block the thread freed last, and frees it at thread exit",
          "[core]") {
  const void* first_block = nullptr;
  {
    auto first = DoneWork::make("allreduce", 1, nullptr);
    first_block = first.get();
    REQUIRE(first->is_completed());
    REQUIRE(first->seq() == 1);
  }
  // The block freed just now comes back, holding the new op's facts.
  auto second = DoneWork::make("broadcast", 2, std::make_exception_ptr(NetworkError("reset")));
  REQUIRE(static_cast<const void*>(second.get()) == first_block);
  REQUIRE(second->seq() == 2);
  REQUIRE(std::string(second->op_name()) == "broadcast");
  REQUIRE_THROWS_AS(second->wait(), NetworkError);
  // Live Works never share a block.
  auto third = DoneWork::make("allreduce", 3, nullptr);
  REQUIRE(third.get() != second.get());
  REQUIRE(second->seq() == 2);

  // Made on one thread, dropped on another that then exits: the other thread keeps the block as
  // its spare and frees it at exit (the sanitizer legs report a leak otherwise).
  std::shared_ptr<Work> handed = DoneWork::make("barrier", 4, nullptr);
  std::thread dropper([w = std::move(handed)]() mutable {
    REQUIRE(w->seq() == 4);
    w.reset();
    auto again = DoneWork::make("barrier", 5, nullptr);  // this thread's spare
    REQUIRE(again->seq() == 5);
  });
  dropper.join();
}
