// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_FAULT with real processes over loopback: each rehearsed fault fails the group, and
// every survivor's error names the faulty rank. Every rank sets the same CHORUS_FAULT value,
// as a launcher would on a real cluster; only the named rank acts on it.
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/transports/fault/fault_transport.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

std::string describe_error(const Error& e) {
  std::string peers;
  for (int p : e.context().peers) {
    peers += std::to_string(p) + " ";
  }
  return std::string(to_string(e.code())) + " peers=[" + peers + "] " + e.what();
}

}  // namespace

TEST_CASE("CHORUS_FAULT close_link: the faulty rank fails at once, the survivors name it",
          "[tcp][mp][fault]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        ::setenv("CHORUS_FAULT", "rank=1:close_link=2,after_bytes=64K", 1);
        // after_bytes counts the collective stream; the single-copy algorithm of a one-host
        // group moves its data outside it, so the ring it is.
        ::setenv("CHORUS_ALGO", "allreduce=ring", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(60s));
        std::vector<float> data(1 << 20, 1.0f);  // 4 MiB: rank 1 sends rank 2 far more than 64 KiB
        const auto t0 = Clock::now();
        const Error e =
            expect_error([&] { pg->allreduce(Tensor::of(data.data(), data.size()))->wait(); });
        const double took = seconds_since(t0);
        const bool ok = rank == 1 ? (e.code() == ErrorCode::aborted &&
                                     contains(e.what(), "CHORUS_FAULT closed"))
                                  : names(e, 1);
        if (!(ok && took < 20.0)) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
      },
      90s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("CHORUS_FAULT stall: the others time out on schedule, naming the stalled rank",
          "[tcp][mp][fault]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        ::setenv("CHORUS_FAULT", "rank=2:stall=8s,at_seq=2", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(2s));
        std::vector<float> data(1000, 1.0f);
        pg->barrier()->wait();  // seq 1 runs normally
        const auto t0 = Clock::now();
        if (rank == 2) {
          // After its stall its op may even complete: its partner in the op (rank 1) sent all
          // it needed before timing out. The group has failed all the same: the others'
          // notices fail the op or, at the latest, the next call.
          try {
            pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
          } catch (const Error&) {
            return;
          }
          expect_error([&] { pg->barrier()->wait(); });
          return;
        }
        const Error e =
            expect_error([&] { pg->allreduce(Tensor::of(data.data(), data.size()))->wait(); });
        const double took = seconds_since(t0);
        // Timeout 2 s + probe grace 0.2 s + slack for a loaded machine.
        if (!(e.code() == ErrorCode::timeout && names(e, 2) &&
              contains(e.what(), "did not answer a status probe") && took < 5.2)) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
      },
      90s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("CHORUS_FAULT exit_at_seq: the rank exits mid-op, every survivor names it at once",
          "[tcp][mp][fault]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        ::setenv("CHORUS_FAULT", "rank=1:exit_at_seq=2", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(60s));
        std::vector<float> data(1 << 20, 1.0f);
        const auto t0 = Clock::now();
        const Error e = expect_error([&] {
          pg->barrier()->wait();
          pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
        });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::network && names(e, 1) && took < 20.0)) {
          throw ChildCheckFailed{"after " + std::to_string(took) + " s: " + describe_error(e)};
        }
      },
      90s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[2].ok());
  CHECK((results[1].exited && results[1].exit_code == cpu::kFaultExitStatus));
}

TEST_CASE("a malformed CHORUS_FAULT fails group creation, naming the variable",
          "[tcp][mp][fault]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        ::setenv("CHORUS_FAULT", "rank=1:explode=now", 1);
        auto store = child_store(server.port());
        const Error e =
            expect_error([&] { make_tcp_group(store, rank, 2, loopback_options(10s)); });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument);
        CHILD_CHECK(contains(e.what(), "CHORUS_FAULT='rank=1:explode=now'"));
      },
      60s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
