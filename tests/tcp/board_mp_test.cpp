// SPDX-License-Identifier: BSD-3-Clause
// The small-op board (tcp/slot_board.hpp) over real processes on one host: every dtype and op
// up to its size limit and just past it, in and out of place, the same bits on every rank;
// board ops queued behind engine ops and issued from Work callbacks (run by the engine
// thread) mixed with ones the caller runs; and its failure contract: a killed rank named at
// once, a rank that never issues the op named at the timeout, a mismatch named at once.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "cpu/transports/shm/slot_board.hpp"
#include "tcp/collective_cases.hpp"
#include "tcp/issue_case.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// FNV-1a of a buffer: ranks compare their outputs bit for bit through the store.
std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

std::vector<Case> board_cases(int n) {
  std::vector<Case> cases;
  for (DataType dt : kAllTypes) {
    const std::size_t limit = cpu::SlotBoard::kSlotBytes / element_size(dt);
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, limit, limit + 1}) {
        cases.push_back({OpType::allreduce, n, count, dt, op, 0, count % 2 == 1});
      }
    }
  }
  return cases;
}

void run_board_cases(int n) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        for (const Case& c : board_cases(n)) {
          RankBuffers b = make_buffers(c, rank);
          issue_case(*pg, c, b)->wait();
          const std::string err = check_result(c, rank, b);
          if (!err.empty()) {
            throw ChildCheckFailed{err};
          }
        }
        // Values that make float sums depend on the order of the additions: every rank must
        // still get the same bits.
        std::vector<float> x(1000);
        for (std::size_t i = 0; i < x.size(); ++i) {
          x[i] = 1.0f / static_cast<float>(3 + i + 7 * static_cast<std::size_t>(rank));
        }
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          std::vector<float> y = x;
          pg->allreduce(Tensor::of(y.data(), y.size()), {.op = op})->wait();
          const std::string key = fmt::format("print/{}/{}", to_string(op), rank);
          store->set(key, std::to_string(fingerprint(y.data(), y.size() * sizeof(float))));
          const std::string first = store->get_string(fmt::format("print/{}/0", to_string(op)));
          CHILD_CHECK(first == std::to_string(fingerprint(y.data(), y.size() * sizeof(float))));
        }
        pg->barrier()->wait();
      },
      150s);
  REQUIRE_ALL_OK(results);
}

}  // namespace

TEST_CASE("small allreduces through the board: every dtype and op, same bits on every rank",
          "[board][mp]") {
  run_board_cases(2);
  run_board_cases(3);
  run_board_cases(4);
}

// Each round: a large allreduce (engine) with a small one issued right behind it (queued:
// the engine runs it from the board), a small one issued from the large one's callback (the
// engine thread issues it, unless the large one was already done), then one the caller runs.
// Ranks take different turns through these paths at different times; every result must be
// exact.
TEST_CASE("board ops queued behind engine ops, from callbacks and inline, mixed", "[board][mp]") {
  StoreServerProcess server;
  constexpr int n = 3;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        const float expected = static_cast<float>(n * (n + 1) / 2);  // sum of rank + 1
        for (int round = 0; round < 40; ++round) {
          std::vector<float> large(64 * 1024, static_cast<float>(rank + 1));
          std::vector<float> queued(3, static_cast<float>(rank + 1));
          std::vector<float> from_callback(5, static_cast<float>(rank + 1));
          std::vector<float> inline_op(2, static_cast<float>(rank + 1));
          std::atomic<bool> issued{false};
          std::shared_ptr<Work> callback_work;
          // Issue order (the same on every rank): large, queued, the callback's, the inline one.
          auto big = pg->allreduce(Tensor::of(large.data(), large.size()));
          auto small = pg->allreduce(Tensor::of(queued.data(), queued.size()));
          big->then([&](Work&) {
            callback_work = pg->allreduce(Tensor::of(from_callback.data(), from_callback.size()));
            issued.store(true);
          });
          small->wait();
          big->wait();
          while (!issued.load()) {  // the callback runs on the engine thread after big completes
            std::this_thread::yield();
          }
          callback_work->wait();
          pg->allreduce(Tensor::of(inline_op.data(), inline_op.size()))->wait();
          CHILD_CHECK(large.front() == expected && large.back() == expected);
          CHILD_CHECK(queued[0] == expected && queued[2] == expected);
          CHILD_CHECK(from_callback[0] == expected && from_callback[4] == expected);
          CHILD_CHECK(inline_op[0] == expected && inline_op[1] == expected);
        }
      },
      150s);
  REQUIRE_ALL_OK(results);
}

// Rank 1 takes its part in the allreduce only after a tagged message from rank 0, which
// another thread of rank 0 sends while the first waits in the allreduce. A caller that kept
// the group's issue lock while it waited for late peers would keep the send from being issued.
TEST_CASE("a caller waiting on the board does not hold up another thread's send", "[board][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(20s));
        for (int round = 0; round < 20; ++round) {
          float x = 1.0f;
          float token = static_cast<float>(round);
          if (rank == 1) {
            pg->recv(Tensor::of(&token, 1), 0, static_cast<std::uint32_t>(round))->wait();
            CHILD_CHECK(token == static_cast<float>(round));
            pg->allreduce(Tensor::of(&x, 1))->wait();
          } else {
            std::atomic<bool> waiting{false};
            std::thread sender([&] {
              while (!waiting.load()) {
                std::this_thread::yield();
              }
              pg->send(Tensor::of(&token, 1), 1, static_cast<std::uint32_t>(round))->wait();
            });
            waiting.store(true);
            pg->allreduce(Tensor::of(&x, 1))->wait();
            sender.join();
          }
          CHILD_CHECK(x == 2.0f);
        }
      },
      90s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("a rank killed while its peers wait on the board is named at once",
          "[board][mp][failure]") {
  StoreServerProcess server;
  constexpr int n = 3;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        float x = 1.0f;
        pg->allreduce(Tensor::of(&x, 1))->wait();  // all linked, board in use
        pg->barrier()->wait();
        // Rank 2 dies once the others are past the barrier too: a rank that passed it may die
        // while a slower one still waits there for a third, which then fails the barrier.
        if (rank == 2) {
          store->wait({"passed/0", "passed/1"}, 30s);
          ::kill(::getpid(), SIGKILL);
        }
        store->set(fmt::format("passed/{}", rank), "1");
        const auto t0 = Clock::now();
        const Error e = expect_error([&] { pg->allreduce(Tensor::of(&x, 1))->wait(); });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::network && names(e, 2) && took < 5.0)) {
          throw ChildCheckFailed{
              fmt::format("after {:.3f} s: {}: {}", took, to_string(e.code()), e.what())};
        }
      },
      90s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
}

TEST_CASE("a rank that never issues a board op is named at the timeout", "[board][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(30s));
        float x = 1.0f;
        pg->allreduce(Tensor::of(&x, 1))->wait();
        if (rank == 1) {
          store->get("rank0-failed", 60s);  // alive, heartbeating, but never issues the op
          return;
        }
        const auto t0 = Clock::now();
        const Error e = expect_error([&] {
          pg->allreduce(Tensor::of(&x, 1), {.timeout = std::chrono::seconds(2)})->wait();
        });
        const double took = seconds_since(t0);
        store->set("rank0-failed", std::string_view("1"));
        if (!(e.code() == ErrorCode::timeout && names(e, 1) &&
              contains(e.what(), "has not issued this op yet (its last collective is seq 1)") &&
              took >= 1.9 && took < 10.0)) {
          throw ChildCheckFailed{
              fmt::format("after {:.3f} s: {}: {}", took, to_string(e.code()), e.what())};
        }
      },
      90s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("a mismatch on the board is named at once", "[board][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(60s));
        std::vector<float> x(8, 1.0f);
        pg->allreduce(Tensor::of(x.data(), 1))->wait();
        // Seq 2: counts differ (both on the board). Seq 2 again in a fresh group: rank 0 on the
        // board, rank 1 a broadcast (the engine's path).
        const auto t0 = Clock::now();
        Error e =
            expect_error([&] { pg->allreduce(Tensor::of(x.data(), rank == 0 ? 4 : 8))->wait(); });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument);
        CHILD_CHECK(contains(e.what(), "4 x float32") && contains(e.what(), "8 x float32"));
        auto other = make_tcp_group(store, rank, 2, loopback_options(60s));
        other->allreduce(Tensor::of(x.data(), 1))->wait();
        e = expect_error([&] {
          if (rank == 0) {
            other->allreduce(Tensor::of(x.data(), 2))->wait();
          } else {
            other->broadcast(Tensor::of(x.data(), 2), {.root = 0})->wait();
          }
        });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument);
        CHILD_CHECK(contains(e.what(), "broadcast (seq 2"));
        CHILD_CHECK(seconds_since(t0) < 10.0);  // the group timeout is 60 s
      },
      90s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
