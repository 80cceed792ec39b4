// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup::shrink over real processes: after a rank is SIGKILLed (the last, the first, two
// at once) the survivors get a group of themselves, renumbered in order, whose results are
// exact; a SIGSTOPped rank is fenced out and its late wake-up harms nothing; a survivor that
// dies while the survivors' group forms is left out in a second round; shrink on a healthy
// group fails what is in flight and returns every rank. Each survivor prints how long the
// shrink took after its op failed (docs/results.md, "Shrink").
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chorus/store.hpp>

#include "core/survivor_agreement.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// allreduce(sum) of (rank + 1) on every rank of pg: exact, or the rank fails.
void check_sum(ProcessGroup& pg, const char* when) {
  std::vector<float> v(1000, static_cast<float>(pg.rank() + 1));
  pg.allreduce(Tensor::of(v.data(), v.size()))->wait();
  const float want = static_cast<float>(pg.size() * (pg.size() + 1) / 2);
  for (float x : v) {
    CHILD_CHECK(x == want);
  }
  (void)when;
}

// The survivors' new ranks: their old ranks in order, without the dead.
int renumbered(int rank, const std::set<int>& dead) {
  int r = 0;
  for (int old = 0; old < rank; ++old) {
    r += dead.count(old) ? 0 : 1;
  }
  return r;
}

// Every rank runs one allreduce; the ranks in `dead` SIGKILL themselves before the second, which
// fails on the survivors; they shrink and go on in the survivors' group.
void run_killed(int n, const std::set<int>& dead) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        check_sum(*pg, "before");
        store_barrier(*store, "before", rank, n);
        if (dead.count(rank)) {
          ::kill(::getpid(), SIGKILL);
        }
        Clock::time_point failed_at;
        expect_error([&] {
          std::vector<float> v(1 << 16, 1.0f);
          pg->allreduce(Tensor::of(v.data(), v.size()))->wait();
        });
        failed_at = Clock::now();
        // One death: every survivor's error names it, so a long grace costs nothing and keeps
        // a survivor slowed by a busy machine in. Two at once: the survivors wait it out.
        ShrinkOptions shrink;
        shrink.grace = dead.size() == 1 ? 10s : ShrinkOptions{}.grace;
        auto survivors = pg->shrink(shrink);
        const double took_ms = seconds_since(failed_at) * 1000;
        CHILD_CHECK(survivors != nullptr);
        CHILD_CHECK(survivors->size() == n - static_cast<int>(dead.size()));
        CHILD_CHECK(survivors->rank() == renumbered(rank, dead));
        CHILD_CHECK(pg->is_aborted());
        check_sum(*survivors, "after");
        std::fprintf(stderr, "shrink: %d ranks, killed %zu: rank %d took %.1f ms\n", n, dead.size(),
                     rank, took_ms);
      },
      90s);
  INFO(describe(results));
  for (int r = 0; r < n; ++r) {
    const auto& result = results[static_cast<std::size_t>(r)];
    if (dead.count(r)) {
      CHECK(result.signal == SIGKILL);
    } else {
      CHECK(result.ok());
    }
  }
}

}  // namespace

TEST_CASE("shrink after a killed rank: the survivors go on, renumbered, results exact",
          "[tcp][mp][shrink]") {
  SECTION("the last rank") { run_killed(4, {3}); }
  SECTION("the first rank (rank 0 of the group; the store is elsewhere)") { run_killed(4, {0}); }
  SECTION("two ranks at once") { run_killed(5, {1, 3}); }
}

TEST_CASE("shrink fences out a stopped rank; its late wake-up harms nothing", "[tcp][mp][shrink]") {
  constexpr int n = 4;
  constexpr int stopped = 2;
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        TcpGroupOptions options = loopback_options(60s);
        options.peer_timeout = 2s;  // the silent rank is named within about two seconds
        auto pg = make_tcp_group(store, rank, n, options);
        check_sum(*pg, "before");
        if (rank == stopped) {
          store->set("stopped_pid", std::to_string(::getpid()));
          ::raise(SIGSTOP);  // a survivor SIGCONTs us once the survivors' group works
          // Woken after the decision: fenced out, whatever it tries.
          const Error e = expect_error([&] { pg->shrink(); });
          CHILD_CHECK(e.code() == ErrorCode::aborted && contains(e.what(), "fenced out"));
          store->set("fenced", "1");
          return;
        }
        expect_error([&] { check_sum(*pg, "with a stopped rank"); });
        ShrinkOptions shrink;
        shrink.grace = 10s;  // the stopped rank is named: nobody waits for it
        auto survivors = pg->shrink(shrink);
        CHILD_CHECK(survivors->size() == n - 1);
        CHILD_CHECK(survivors->rank() == renumbered(rank, {stopped}));
        check_sum(*survivors, "after");
        if (survivors->rank() == 0) {
          ::kill(std::stoi(store->get_string("stopped_pid", 30s)), SIGCONT);
        }
        store->wait({"fenced"}, 30s);
        check_sum(*survivors, "after the stopped rank woke");
      },
      90s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
  }
}

TEST_CASE("shrink: a survivor that dies while the group forms is left out in a second round",
          "[tcp][mp][shrink]") {
  constexpr int n = 4;
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        check_sum(*pg, "before");
        store_barrier(*store, "before", rank, n);
        if (rank == 3) {
          ::kill(::getpid(), SIGKILL);
        }
        expect_error([&] { check_sum(*pg, "with a dead rank"); });
        if (rank == 2) {
          // Arrive in the first round as shrink() would, then die before the group forms. The
          // namespace is the group's ("tcp/g1": the first group of this process on this store)
          // and the first shrink's first round.
          auto round = make_prefix_store("shrink0/r0", make_prefix_store("tcp/g1", store));
          detail::agree_on_survivors(*round, detail::SurvivorAgreement{
                                                 .rank = rank,
                                                 .size = n,
                                                 .group = "world",
                                                 .known_dead = {3},
                                                 .grace = 10s,
                                                 .deadline = Deadline::after(30s),
                                             });
          ::kill(::getpid(), SIGKILL);
        }
        ShrinkOptions shrink;
        shrink.grace = 10s;  // rank 2 arrives in the first round
        shrink.join_timeout = 2s;
        auto survivors = pg->shrink(shrink);
        CHILD_CHECK(survivors->size() == 2);
        CHILD_CHECK(survivors->rank() == rank);
        check_sum(*survivors, "after");
      },
      90s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
  CHECK(results[3].signal == SIGKILL);
}

TEST_CASE("shrink on a healthy group fails what is in flight and returns every rank",
          "[tcp][mp][shrink]") {
  constexpr int n = 3;
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        std::vector<float> never(10);
        auto pending = pg->recv(Tensor::of(never.data(), never.size()), (rank + 1) % n, 7);
        // shrink() aborts this group on every rank that calls it, and a peer's abort reaches
        // the others at once: a rank that has not posted its recv yet would have it refused
        // and never reach shrink(). Every rank posts before any shrinks.
        store_barrier(*store, "posted", rank, n);
        auto survivors = pg->shrink();
        const Error e = expect_error([&] { pending->wait(); });
        CHILD_CHECK(e.code() == ErrorCode::aborted);
        CHILD_CHECK(survivors->size() == n && survivors->rank() == rank);
        CHILD_CHECK(contains(survivors->name(), "world/shrink0"));
        check_sum(*survivors, "after");
        // The survivors' group shrinks too, once every rank has its sum (a rank still receiving
        // the allreduce's last slice would see its group aborted under it).
        store_barrier(*store, "summed", rank, n);
        auto again = survivors->shrink();
        CHILD_CHECK(again->size() == n);
        check_sum(*again, "after the second shrink");
      },
      60s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
  }
}

}  // namespace chorus::test
