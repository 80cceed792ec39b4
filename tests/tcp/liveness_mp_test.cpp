// SPDX-License-Identifier: BSD-3-Clause
// Peer liveness with real processes over loopback: a stopped rank is declared dead at the peer
// timeout, long before the op's deadline, naming it; a rank that computes for 30 s between
// collectives (six peer timeouts) is alive, because heartbeats come from its progress thread;
// so is one whose then() callback blocks for three peer timeouts, because callbacks run on a
// thread of their own.
// Silent links on a network-namespace cluster: tests/netns/liveness_test.sh.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tcp/mp_common.hpp"

namespace chorus::test {

TEST_CASE("a stopped rank is declared dead at the peer timeout, not at the op's deadline",
          "[tcp][mp][liveness]") {
  constexpr double kBound = 2.0 + 6.0;  // peer timeout + slack for a loaded machine; op: 120 s
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        TcpGroupOptions o = loopback_options(120s);
        o.peer_timeout = 2s;
        auto pg = make_tcp_group(store, rank, 3, o);
        std::vector<float> data(1000, 1.0f);
        pg->barrier()->wait();
        if (rank == 2) {
          // Stopped before issuing the allreduce, so the others can never complete it (had it
          // been issued first, its engine might finish it before the stop on a busy machine).
          store->set("pid2", std::to_string(::getpid()));
          ::raise(SIGSTOP);  // rank 0 SIGKILLs us once both survivors checked their errors
          return;
        }
        const auto t0 = Clock::now();
        auto work = pg->allreduce(Tensor::of(data.data(), data.size()));
        const Error e = expect_error([&] { work->wait(); });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::network && names(e, 2) && took < kBound &&
              contains(e.what(), "no traffic or heartbeat from rank 2") &&
              contains(e.what(), "CHORUS_PEER_TIMEOUT"))) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + e.what()};
        }
        store->set("checked/" + std::to_string(rank), "1");
        if (rank == 0) {
          store->wait({"checked/1"}, 60s);
          ::kill(std::stoi(store->get_string("pid2", 30s)), SIGKILL);
        }
      },
      90s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
}

TEST_CASE("no false positive: a rank computing for 30 s between collectives is alive",
          "[tcp][mp][liveness]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        TcpGroupOptions o = loopback_options(120s);
        o.peer_timeout = 5s;
        auto pg = make_tcp_group(store, rank, 3, o);
        std::vector<float> data(1000, 1.0f);
        pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
        if (rank == 1) {
          // The user thread is busy (the scenario: a long forward pass), not waiting on chorus.
          std::this_thread::sleep_for(30s);
        }
        std::fill(data.begin(), data.end(), 1.0f);
        pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
        CHILD_CHECK(data[0] == 3.0f && data[999] == 3.0f);
        pg->barrier()->wait();
      },
      100s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
  }
}

TEST_CASE("no false positive: a then() callback blocked for three peer timeouts is alive",
          "[tcp][mp][liveness]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        TcpGroupOptions o = loopback_options(120s);
        o.peer_timeout = 1s;
        auto pg = make_tcp_group(store, rank, 3, o);
        const auto caller = std::this_thread::get_id();
        std::mutex mu;
        std::condition_variable cv;
        bool released = false;
        std::atomic<bool> ran_on_caller{false};
        std::atomic<bool> finished{false};
        std::vector<float> first(1000, 1.0f);
        if (rank == 0) {
          store->wait({"chained"}, 60s);  // rank 1's callback is pending when the op completes
        }
        auto work = pg->allreduce(Tensor::of(first.data(), first.size()));
        if (rank == 1) {
          // Blocks until the caller is done with 30 more ops over three peer timeouts (a
          // callback waiting for a lock, the GIL, a debugger): neither the group's heartbeats
          // nor its other ops may wait for it.
          work->then([&](Work&) {
            ran_on_caller = std::this_thread::get_id() == caller;
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return released; });
            finished = true;
          });
          store->set("chained", "1");
        }
        work->wait();
        for (int i = 0; i < 30; ++i) {
          float x = static_cast<float>(rank);
          pg->allreduce(Tensor::of(&x, 1))->wait();
          CHILD_CHECK(x == 3.0f);
          std::this_thread::sleep_for(100ms);  // pacing: 30 ops over 3 s
        }
        CHILD_CHECK(!finished.load());  // the callback was blocked all along
        {
          std::lock_guard lock(mu);
          released = true;
        }
        cv.notify_all();
        pg->barrier()->wait();
        CHILD_CHECK(first[0] == 3.0f && first[999] == 3.0f);
        if (rank == 1) {
          const Deadline bound = Deadline::after(30s);
          while (!finished.load() && !bound.expired()) {
            std::this_thread::yield();
          }
          CHILD_CHECK(finished.load() && !ran_on_caller.load());
        }
      },
      100s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
  }
}

}  // namespace chorus::test
