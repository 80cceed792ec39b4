// SPDX-License-Identifier: BSD-3-Clause
// Failure behaviour over real processes: who gets which error, within which time (upper
// bounds tied to the configured timeout), and that the group then fails fast with the
// original error. Ranks coordinate through store keys, never sleeps.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

constexpr auto kTimeout = 2000ms;
// The error must arrive by the timeout, plus the status-probe grace (<= timeout/10, at least
// 100 ms), plus slack for a loaded 2-core machine.
constexpr double kTimeoutBound = 2.0 + 0.2 + 3.0;

std::string describe_error(const Error& e) {
  std::string peers;
  for (int p : e.context().peers) {
    peers += std::to_string(p) + " ";
  }
  return std::string(to_string(e.code())) + " peers=[" + peers + "] " + e.what();
}

}  // namespace

TEST_CASE(
    "a collective past its timeout fails on every waiting rank, naming the rank that never issued it",
    "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(kTimeout));
        std::vector<float> data(1000, 1.0f);
        if (rank == 2) {
          // Never issues the allreduce; waits until both others checked their errors.
          // It hears the others' abort notice: a receive nobody serves fails with their error.
          float x = 0;
          const Error e =
              expect_error([&] { pg->recv(Tensor::of(&x, 1), 0, 99, {.timeout = 30s})->wait(); });
          if (!(e.code() == ErrorCode::timeout && contains(e.what(), "aborted the group") &&
                names(e, 2))) {
            throw ChildCheckFailed{describe_error(e)};
          }
          store->wait({"checked/0", "checked/1"}, 30s);
          return;
        }
        const auto t0 = Clock::now();
        auto work = pg->allreduce(Tensor::of(data.data(), data.size()), {.timeout = kTimeout});
        const Error e = expect_error([&] { work->wait(); });
        const double took = seconds_since(t0);
        INFO(describe_error(e));
        if (e.code() != ErrorCode::timeout) {
          throw ChildCheckFailed{"expected TimeoutError, got " + describe_error(e)};
        }
        if (!(took < kTimeoutBound && names(e, 2) && e.context().seq == 1 &&
              e.context().op == "allreduce" && e.context().bytes == 4000 &&
              contains(e.what(), "allreduce (seq 1, 1000 x float32, sum") &&
              contains(e.what(), "has not issued this op"))) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
        // Later calls fail fast with the original error.
        const auto t1 = Clock::now();
        try {
          pg->barrier();
          throw ChildCheckFailed{"barrier after a timeout did not throw"};
        } catch (const TimeoutError& again) {
          CHILD_CHECK(std::string(again.what()) == e.what());
          CHILD_CHECK(seconds_since(t1) < 1.0);
        }
        CHILD_CHECK(pg->is_aborted());
        store->set("checked/" + std::to_string(rank), "1");
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("a rank killed mid-collective makes every survivor fail at once, naming it",
          "[tcp][mp][failure]") {
  StoreServerProcess server;
  constexpr int n = 4;
  constexpr auto kLong = 60s;  // detection must not wait for this
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(kLong));
        std::vector<float> data(4 << 20, 1.0f);  // 16 MiB: the ring takes a while
        const auto t0 = Clock::now();
        // The survivors may still be finishing the barrier when rank 3 dies: either op may be
        // the one that fails (a death fails the group at once, even if the data still needed
        // from the dead rank had already arrived).
        const Error e = expect_error([&] {
          pg->barrier()->wait();
          auto work = pg->allreduce(Tensor::of(data.data(), data.size()));
          if (rank == 3) {
            ::kill(::getpid(), SIGKILL);
          }
          work->wait();
        });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::network && names(e, 3) && took < 10.0)) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
      },
      90s);
  INFO(describe(results));
  for (int r = 0; r < 3; ++r) {
    CHECK(results[static_cast<std::size_t>(r)].ok());
  }
  CHECK(results[3].signal == SIGKILL);
}

TEST_CASE("a stopped rank makes the others time out on schedule, naming it", "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(kTimeout));
        std::vector<float> data(1 << 20, 1.0f);
        pg->barrier()->wait();
        if (rank == 2) {
          // Stopped before issuing the allreduce: had it been issued first, its engine could
          // finish its part with a neighbour before the stop took hold on a busy machine.
          store->set("pid2", std::to_string(::getpid()));
          ::raise(SIGSTOP);  // rank 0 SIGKILLs us once both survivors checked their errors
          return;
        }
        const auto t0 = Clock::now();
        auto work = pg->allreduce(Tensor::of(data.data(), data.size()));
        const Error e = expect_error([&] { work->wait(); });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::timeout && names(e, 2) && took < kTimeoutBound &&
              contains(e.what(), "did not answer a status probe"))) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
        store->set("checked/" + std::to_string(rank), "1");
        if (rank == 0) {
          store->wait({"checked/1"}, 30s);
          ::kill(std::stoi(store->get_string("pid2", 30s)), SIGKILL);
        }
      },
      60s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
}

TEST_CASE("abort() from another thread wakes every waiter and tells the peers",
          "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(60s));
        if (rank == 1) {
          // Never joins the allreduce; a receive that nobody serves fails as soon as rank 0's
          // abort notice arrives.
          float x = 0;
          const auto t0 = Clock::now();
          const Error e = expect_error([&] { pg->recv(Tensor::of(&x, 1), 0, 99)->wait(); });
          store->set("abort_seen", "1");
          if (!(e.code() == ErrorCode::aborted && contains(e.what(), "test abort") &&
                seconds_since(t0) < 20.0)) {
            throw ChildCheckFailed{describe_error(e)};
          }
          return;
        }
        std::vector<float> a(100, 1.0f);
        std::vector<float> b(100, 1.0f);
        auto w1 = pg->allreduce(Tensor::of(a.data(), a.size()));
        auto w2 = pg->allreduce(Tensor::of(b.data(), b.size()));
        std::vector<std::string> seen(2);
        std::vector<std::thread> waiters;
        for (int i = 0; i < 2; ++i) {
          waiters.emplace_back([&, i] {
            try {
              (i == 0 ? w1 : w2)->wait();
              seen[static_cast<std::size_t>(i)] = "no error";
            } catch (const Error& e) {
              seen[static_cast<std::size_t>(i)] = to_string(e.code());
            }
          });
        }
        const auto t0 = Clock::now();
        std::thread aborter([&] { pg->abort("test abort"); });
        aborter.join();
        for (auto& t : waiters) {
          t.join();
        }
        const double took = seconds_since(t0);
        CHILD_CHECK(seen[0] == "aborted" && seen[1] == "aborted");
        CHILD_CHECK(took < 5.0);
        const Error later = expect_error([&] { pg->barrier(); });
        CHILD_CHECK(later.code() == ErrorCode::aborted && contains(later.what(), "test abort"));
        // Stays in the group until rank 1 heard of the abort: leaving (a goodbye) before rank 1,
        // slow to start under load, even posted its recv would make that recv a receive from a
        // rank that left, which is another case than the one tested here.
        store->wait({"abort_seen"}, 30s);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("ranks issuing different collectives at one sequence number get an error naming both",
          "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        std::vector<float> data(64, 1.0f);
        std::vector<double> wide(64, 1.0);
        struct Variant {
          const char* name;
          std::function<std::shared_ptr<Work>(ProcessGroup&, bool odd)> issue;
          std::string odd_sig;
          std::string normal_sig;
        };
        const std::vector<Variant> variants = {
            {"count",
             [&](ProcessGroup& pg, bool odd) {
               return pg.allreduce(Tensor::of(data.data(), odd ? 10 : 20));
             },
             "allreduce (seq 1, 10 x float32, sum)", "allreduce (seq 1, 20 x float32, sum)"},
            {"dtype",
             [&](ProcessGroup& pg, bool odd) {
               return odd ? pg.allreduce(Tensor::of(wide.data(), 20))
                          : pg.allreduce(Tensor::of(data.data(), 20));
             },
             "allreduce (seq 1, 20 x float64, sum)", "allreduce (seq 1, 20 x float32, sum)"},
            {"op",
             [&](ProcessGroup& pg, bool odd) {
               return pg.allreduce(Tensor::of(data.data(), 20),
                                   {.op = odd ? ReduceOp::max : ReduceOp::sum});
             },
             "allreduce (seq 1, 20 x float32, max)", "allreduce (seq 1, 20 x float32, sum)"},
            {"root",
             [&](ProcessGroup& pg, bool odd) {
               return pg.broadcast(Tensor::of(data.data(), 20), {.root = odd ? 1 : 0});
             },
             "broadcast (seq 1, 20 x float32, root 1)", "broadcast (seq 1, 20 x float32, root 0)"},
            {"collective",
             [&](ProcessGroup& pg, bool odd) {
               return odd ? pg.broadcast(Tensor::of(data.data(), 20))
                          : pg.allreduce(Tensor::of(data.data(), 20));
             },
             "broadcast (seq 1, 20 x float32, root 0)", "allreduce (seq 1, 20 x float32, sum)"},
        };
        for (const auto& v : variants) {
          // A fresh group per variant: the mismatch aborts it.
          auto pg = make_tcp_group(store, rank, 3, loopback_options(20s));
          const auto t0 = Clock::now();
          const Error e = expect_error([&] {
            v.issue(*pg, rank == 1)->wait();
            // A rank whose partners in this op all agree with it (rank 2 of a tree broadcast
            // from root 0 hears only from rank 0) finishes the op; its next call fails.
            pg->barrier()->wait();
          });
          const std::string what = e.what();
          // Every rank names both signatures (its own check, or the notice of the rank
          // that caught it) and rank 1; and nobody waits for the timeout.
          const bool both = contains(what, v.odd_sig) && contains(what, v.normal_sig);
          const bool odd_named = contains(what, v.odd_sig) && contains(what, "rank 1");
          if (!((both || (rank == 2 && odd_named)) && contains(what, "rank 1") &&
                seconds_since(t0) < 10.0)) {
            throw ChildCheckFailed{std::string(v.name) + ": " + describe_error(e)};
          }
          store->set(fmt::format("{}/{}", v.name, rank), "1");
          store->wait({fmt::format("{}/0", v.name), fmt::format("{}/1", v.name),
                       fmt::format("{}/2", v.name)},
                      30s);
        }
      },
      90s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("group setup names the ranks that never showed up", "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        const auto t0 = Clock::now();
        // A group of 3 where rank 2 never starts.
        const Error e =
            expect_error([&] { make_tcp_group(store, rank, 3, loopback_options(kTimeout)); });
        const double took = seconds_since(t0);
        const auto& peers = e.context().peers;
        if (!(e.code() == ErrorCode::timeout && peers == std::vector<int>{2} &&
              contains(e.what(), "ranks 2 never") && took < kTimeoutBound)) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("a rank that leaves the group while others still need it is named",
          "[tcp][mp][failure]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(60s));
        pg->barrier()->wait();
        if (rank == 1) {
          pg.reset();  // destroys its group: a goodbye, then the sockets close
          return;
        }
        std::vector<float> data(1000, 1.0f);
        const auto t0 = Clock::now();
        const Error e =
            expect_error([&] { pg->allreduce(Tensor::of(data.data(), data.size()))->wait(); });
        if (!(e.code() == ErrorCode::network && names(e, 1) &&
              contains(e.what(), "left the group") && seconds_since(t0) < 10.0)) {
          throw ChildCheckFailed{describe_error(e)};
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
