// SPDX-License-Identifier: BSD-3-Clause
// WorkState: complete once, wait/wait_for, errors (each waiter's its own copy), then()
// callbacks, wait from a callback.
#include <catch2/catch.hpp>

#include <atomic>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

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

namespace {

// The exception object `fn` throws (by address), with a copy of its error.
template <class F>
std::pair<const void*, Error> thrown_by(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {&e, e};
  }
  FAIL("nothing thrown");
  return {nullptr, Error(ErrorCode::internal, "")};
}

}  // namespace

TEST_CASE("each waiter of a failed Work gets its own copy of the error, class and facts kept",
          "[core]") {
  ErrorContext ctx;
  ctx.rank = 1;
  ctx.op = "recv";
  ctx.peers = {0, 2};
  auto work = std::make_shared<WorkState>("recv", 9);
  const auto original = std::make_exception_ptr(InvalidArgument("expects 16 bytes", ctx));
  work->complete(original);
  // Held at once, the copies are distinct objects, none of them the original.
  const auto a = work->exception();
  const auto b = work->exception();
  REQUIRE(a != b);
  REQUIRE(a != original);
  REQUIRE(b != original);
  const void* original_object = thrown_by([&] { std::rethrow_exception(original); }).first;
  const auto [waited, waited_error] = thrown_by([&] { work->wait(); });
  REQUIRE(waited != original_object);
  const auto [from_a, a_error] = thrown_by([&] { std::rethrow_exception(a); });
  for (const Error* e : {&waited_error, &a_error}) {
    REQUIRE(e->code() == ErrorCode::invalid_argument);
    REQUIRE(std::string(e->what()) == "expects 16 bytes");
    REQUIRE(e->context().peers == std::vector<int>{0, 2});
    REQUIRE(e->context().op == "recv");
  }
  REQUIRE_THROWS_AS(work->wait(), InvalidArgument);

  // Every class of the hierarchy is kept, and the base class with its code.
  auto done = DoneWork::make("barrier", 1, std::make_exception_ptr(TimeoutError("late")));
  REQUIRE_THROWS_AS(done->wait(), TimeoutError);
  REQUIRE(done->exception() != done->exception());
  auto aborted = WorkState::completed("allreduce", 2,
                                      std::make_exception_ptr(Error(ErrorCode::aborted, "abort")));
  REQUIRE(thrown_by([&] { aborted->wait(); }).second.code() == ErrorCode::aborted);
  for (auto error : {std::make_exception_ptr(NetworkError("reset")),
                     std::make_exception_ptr(StoreError("refused")),
                     std::make_exception_ptr(BackendError("nccl"))}) {
    auto w = WorkState::completed("allreduce", 3, error);
    try {
      w->wait();
    } catch (const Error& e) {
      try {
        std::rethrow_exception(error);
      } catch (const Error& original) {
        REQUIRE(typeid(e) == typeid(original));
      }
    }
  }
  // An exception outside the hierarchy cannot be copied portably: it is rethrown as it is.
  auto foreign =
      WorkState::completed("allreduce", 4, std::make_exception_ptr(std::runtime_error("callback")));
  REQUIRE_THROWS_AS(foreign->wait(), std::runtime_error);
}

// The window of a failed op whose waiters read its error while the engine drops the op: each
// waiter lets go of the Work before it reads the error (a temporary, as in
// `pg->recv(...)->wait()`), and the completing thread drops the last reference only after every
// waiter has read, signalled through a relaxed counter, which orders nothing for
// ThreadSanitizer. A waiter reading a shared exception object would be reported here (its frees
// on the completing thread, the reads on the waiters); each reading its own copy is not.
TEST_CASE("errors waited from several threads while the completing thread drops the Work",
          "[core]") {
  constexpr int kWaiters = 4;
  constexpr int kRounds = 200;
  std::atomic<int> wrong{0};
  for (int round = 0; round < kRounds; ++round) {
    auto work = std::make_shared<WorkState>("recv", static_cast<std::uint64_t>(round + 1));
    std::vector<std::shared_ptr<WorkState>> handed(kWaiters, work);
    std::atomic<int> copied{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < kWaiters; ++i) {
      waiters.emplace_back([&, i] {
        try {
          std::shared_ptr<WorkState>(std::move(handed[static_cast<std::size_t>(i)]))->wait();
          wrong.fetch_add(1);
        } catch (const Error& e) {
          const Error copy = e;
          if (copy.context().peers != std::vector<int>{1, 2, 3} || copy.context().op != "recv") {
            wrong.fetch_add(1);
          }
        }
        copied.fetch_add(1, std::memory_order_relaxed);
      });
    }
    std::thread engine([&, w = std::move(work)]() mutable {
      ErrorContext ctx;
      ctx.op = "recv";
      ctx.peers = {1, 2, 3};
      w->complete(std::make_exception_ptr(InvalidArgument("expects 16 bytes", ctx)));
      while (copied.load(std::memory_order_relaxed) < kWaiters) {
        std::this_thread::yield();
      }
      w.reset();  // the last reference: the op and its error are freed here
    });
    for (auto& t : waiters) {
      t.join();
    }
    engine.join();
  }
  REQUIRE(wrong.load() == 0);
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
