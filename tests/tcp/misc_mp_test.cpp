// SPDX-License-Identifier: BSD-3-Clause
// Group-level behaviour over real processes: many small ops back to back, two groups used
// concurrently, subgroups, tagged send/recv (matching, unexpected messages, size mismatch,
// interleaving with collectives), several sockets per peer, large payloads. (IPv6:
// ipv6_mp_test.cpp.)
#include <dirent.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Sockets of this process whose send buffer (SO_SNDBUF as the kernel reports it) is `bytes`.
int sockets_with_send_buffer(int bytes) {
  int found = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    return -1;
  }
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    int value = 0;
    socklen_t len = sizeof(value);
    if (e->d_name[0] != '.' && fd != ::dirfd(dir) &&
        ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &len) == 0 && value == bytes) {
      ++found;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

TEST_CASE("10,000 small collectives back to back", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      4,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 4, loopback_options());
        // Windows of 100 queued ops, each on its own element; the last of each window is waited.
        std::vector<float> xs(100);
        std::shared_ptr<Work> last;
        for (int i = 0; i < 10000; ++i) {
          float& x = xs[static_cast<std::size_t>(i % 100)];
          x = 1.0f;
          last = pg->allreduce(Tensor::of(&x, 1));
          if (i % 100 == 99) {
            last->wait();
            for (float v : xs) {
              CHILD_CHECK(v == 4.0f);
            }
          }
        }
        last->wait();
        CHILD_CHECK(last->seq() == 10000);
      },
      120s);
  REQUIRE_ALL_OK(results);
}

// CPU time this process used (all threads), in seconds.
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The engine and Work::wait() look for a small op's data for a few tens of microseconds before
// they sleep. Neither may turn into a busy loop: not in an idle group right after a burst of
// small ops, nor while an op waits for a late peer. (A thread that kept spinning would use
// about 0.3 s of CPU in each 0.3 s phase here, half that with two CPU hogs on 2 cores.)
TEST_CASE("idle ranks and ranks waiting for a late peer do not burn a core", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto store = child_store(server.port());
        for (const char* transport : {"tcp", "auto"}) {
          ::setenv("CHORUS_TRANSPORT", transport, 1);
          auto pg = make_tcp_group(store, rank, 2, loopback_options());
          float x = 1.0f;
          for (int i = 0; i < 200; ++i) {
            x = 1.0f;
            pg->allreduce(Tensor::of(&x, 1))->wait();
          }
          CHILD_CHECK(x == 2.0f);
          // Idle: nothing issued for 0.3 s (the pause is the case, not a synchronization).
          const double idle_from = process_cpu_seconds();
          std::this_thread::sleep_for(300ms);
          const double idle_cpu = process_cpu_seconds() - idle_from;
          // Late peer: rank 1 issues its op 0.3 s after rank 0 does.
          if (rank == 1) {
            std::this_thread::sleep_for(300ms);
          }
          const double wait_from = process_cpu_seconds();
          // Small: the waiting caller drives the loop (tcp), or waits on the board (auto).
          float late = 1.0f;
          pg->allreduce(Tensor::of(&late, 1))->wait();
          std::vector<float> v(1 << 15, 1.0f);  // 128 KiB: past the board, through the engine
          pg->allreduce(Tensor::of(v.data(), v.size()))->wait();
          pg->allreduce(Tensor::of(&x, 1))->wait();
          const double wait_cpu = process_cpu_seconds() - wait_from;
          CHILD_CHECK(late == 2.0f && v[0] == 2.0f && x == 4.0f);
          if (idle_cpu > 0.1 || (rank == 0 && wait_cpu > 0.1)) {
            throw ChildCheckFailed{fmt::format(
                "CHORUS_TRANSPORT={}: {:.3f} s of CPU while idle for 0.3 s, {:.3f} s while "
                "waiting about 0.3 s for a late peer",
                transport, idle_cpu, wait_cpu)};
          }
          pg->barrier()->wait();
        }
      },
      120s);
  REQUIRE_ALL_OK(results);
}

// A caller waiting for a small op runs the engine's loop itself while the engine thread parks
// (LoopRunner::drive). Work that no caller drives must still move: an op nobody waits on (only
// polled, or with a then() callback), tagged messages, and another thread's ops while the
// driving caller waits for a late peer.
TEST_CASE("ops nobody waits on complete while callers drive the loop", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", "tcp", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options());
        for (int round = 0; round < 50; ++round) {
          float x = 1.0f;
          pg->allreduce(Tensor::of(&x, 1))->wait();  // driven: the engine thread parks
          CHILD_CHECK(x == 2.0f);
          // Issued right after a drive and never waited on: polled until done, bounded.
          float y = static_cast<float>(round);
          std::atomic<bool> called{false};
          auto work = pg->allreduce(Tensor::of(&y, 1));
          work->then([&](Work&) { called.store(true); });
          const Deadline bound = Deadline::after(10s);
          while (!(work->is_completed() && called.load()) && !bound.expired()) {
            std::this_thread::yield();
          }
          CHILD_CHECK(work->is_completed() && called.load());
          CHILD_CHECK(y == 2.0f * static_cast<float>(round));
          // A tagged message (never driven) after a drive.
          double m = rank == 0 ? 0.5 + round : -1;
          auto p2p = rank == 0 ? pg->send(Tensor::of(&m, 1), 1, static_cast<std::uint32_t>(round))
                               : pg->recv(Tensor::of(&m, 1), 0, static_cast<std::uint32_t>(round));
          const Deadline p2p_bound = Deadline::after(10s);
          while (!p2p->is_completed() && !p2p_bound.expired()) {
            std::this_thread::yield();
          }
          CHILD_CHECK(p2p->is_completed() && m == 0.5 + round);
        }
        // Rank 0's main thread drives an allreduce that rank 1 joins only once rank 0's second
        // thread has received a tagged message (its recv Work has no driver): the driving
        // caller moves that recv too, and the second thread is not stuck behind its lease.
        float z = 3.0f;
        if (rank == 0) {
          std::thread second([&] {
            double got = 0;
            pg->recv(Tensor::of(&got, 1), 1, 1000)->wait();
            store->set("misc/drive/got", std::to_string(got));
          });
          pg->allreduce(Tensor::of(&z, 1))->wait();
          second.join();
        } else {
          double sent = 42.0;
          pg->send(Tensor::of(&sent, 1), 0, 1000)->wait();
          CHILD_CHECK(store->get_string("misc/drive/got", 20s) == "42.000000");
          pg->allreduce(Tensor::of(&z, 1))->wait();
        }
        CHILD_CHECK(z == 6.0f);
        pg->barrier()->wait();
      },
      120s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("two groups used concurrently from two threads", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto store = child_store(server.port());
        auto a = make_tcp_group(store, rank, 3, loopback_options());
        auto b = make_tcp_group(store, rank, 3, loopback_options());
        std::vector<std::string> errors(2);
        auto loop = [&](ProcessGroup& pg, int which) {
          try {
            std::vector<std::int64_t> v(3000);
            for (int i = 0; i < 200; ++i) {
              std::iota(v.begin(), v.end(), rank + which * 1000 + i);
              pg.allreduce(Tensor::of(v.data(), v.size()))->wait();
              for (std::size_t j = 0; j < v.size(); ++j) {
                const std::int64_t want = 3 * (static_cast<std::int64_t>(j) + which * 1000 + i) + 3;
                if (v[j] != want) {
                  errors[static_cast<std::size_t>(which)] = "wrong value";
                  return;
                }
              }
            }
          } catch (const std::exception& e) {
            errors[static_cast<std::size_t>(which)] = e.what();
          }
        };
        std::thread ta([&] { loop(*a, 0); });
        std::thread tb([&] { loop(*b, 1); });
        ta.join();
        tb.join();
        if (!errors[0].empty() || !errors[1].empty()) {
          throw ChildCheckFailed{errors[0] + " | " + errors[1]};
        }
      },
      120s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("split makes subgroups on members and nullptr elsewhere", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      4,
      [&](int rank) {
        auto world = make_tcp_group(child_store(server.port()), rank, 4, loopback_options());
        auto odd = world->split({1, 3});
        auto low = world->split({0, 1}, {.name = "low"});
        CHILD_CHECK((odd != nullptr) == (rank % 2 == 1));
        CHILD_CHECK((low != nullptr) == (rank < 2));
        if (odd) {
          CHILD_CHECK(odd->size() == 2 && odd->rank() == rank / 2);
          int x = rank;
          odd->allreduce(Tensor::of(&x, 1))->wait();
          CHILD_CHECK(x == 4);
        }
        if (low) {
          CHILD_CHECK(low->name() == "low" && low->rank() == rank);
          int x = rank + 10;
          low->allreduce(Tensor::of(&x, 1), {.op = ReduceOp::max})->wait();
          CHILD_CHECK(x == 11);
        }
        // The parent group still works, alongside the subgroups.
        int y = 1;
        world->allreduce(Tensor::of(&y, 1))->wait();
        CHILD_CHECK(y == 4);
        try {
          world->split({2, 1});
          CHILD_CHECK(false);
        } catch (const InvalidArgument&) {
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("tagged send/recv: matching by tag, early arrivals, size mismatch, next to collectives",
          "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 2, loopback_options());
        std::vector<double> big(1 << 18);
        if (rank == 0) {
          double a = 1.5;
          double b = 2.5;
          std::iota(big.begin(), big.end(), 0.0);
          // An allreduce issued before the sends; rank 1 receives first, then joins it.
          int x = 1;
          auto coll = pg->allreduce(Tensor::of(&x, 1));
          pg->send(Tensor::of(&a, 1), 1, 7);
          pg->send(Tensor::of(&b, 1), 1, 8);
          pg->send(Tensor::of(big.data(), big.size()), 1, 9)->wait();
          pg->send(Tensor::of(&a, 1), 1, 10)->wait();
          coll->wait();
          CHILD_CHECK(x == 2);
        } else {
          double a = 0;
          double b = 0;
          // Tags out of order: 8 before 7 (7 arrives first and waits as unexpected).
          pg->recv(Tensor::of(&b, 1), 0, 8)->wait();
          pg->recv(Tensor::of(&a, 1), 0, 7)->wait();
          CHILD_CHECK(a == 1.5 && b == 2.5);
          pg->recv(Tensor::of(big.data(), big.size()), 0, 9)->wait();
          CHILD_CHECK(big[12345] == 12345.0);
          // Wrong size: this recv fails, the group stays usable.
          double two[2];
          const Error e = expect_error([&] { pg->recv(Tensor::of(two, 2), 0, 10)->wait(); });
          CHILD_CHECK(e.code() == ErrorCode::invalid_argument &&
                      contains(e.what(), "expects 16 bytes"));
          int x = 1;
          pg->allreduce(Tensor::of(&x, 1))->wait();
          CHILD_CHECK(x == 2);
        }
        pg->barrier()->wait();
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("tagged recv from any source: the sender named, post order, arrival order, errors",
          "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 3, loopback_options());
        double v = 0;
        int go = 0;
        if (rank == 0) {
          // Two senders, one tag: each message goes to one of two any-source recvs, and each
          // recv's Work names its sender.
          double a = 0;
          double b = 0;
          auto wa = pg->recv(Tensor::of(&a, 1), kAnySource, 5);
          auto wb = pg->recv(Tensor::of(&b, 1), kAnySource, 5);
          wa->wait();
          wb->wait();
          CHILD_CHECK(wa->source_rank() + wb->source_rank() == 3);
          CHILD_CHECK(a == 10.0 * wa->source_rank() && b == 10.0 * wb->source_rank());

          // Of two recvs that match a message, the one posted first takes it: the any-source
          // recv, posted before the recv from rank 2, gets rank 2's first message.
          double first = 0;
          double second = 0;
          auto any = pg->recv(Tensor::of(&first, 1), kAnySource, 7);
          auto from2 = pg->recv(Tensor::of(&second, 1), 2, 7);
          pg->barrier()->wait();  // both recvs are posted before rank 2 sends
          any->wait();
          from2->wait();
          CHILD_CHECK(first == 70.0 && second == 71.0 && any->source_rank() == 2);
          CHILD_CHECK(from2->source_rank() == 2);

          // Both messages already buffered: the one that arrived first is taken first. Rank 1's
          // marker (tag 9, after its tag 8 message on the same connection) is received before
          // rank 2 is told to send.
          pg->recv(Tensor::of(&v, 1), 1, 9)->wait();
          pg->send(Tensor::of(&go, 1), 2, 3)->wait();
          pg->recv(Tensor::of(&v, 1), 2, 9)->wait();
          auto early = pg->recv(Tensor::of(&v, 1), kAnySource, 8);
          early->wait();
          CHILD_CHECK(early->source_rank() == 1 && v == 1.0);
          auto late = pg->recv(Tensor::of(&v, 1), kAnySource, 8);
          late->wait();
          CHILD_CHECK(late->source_rank() == 2 && v == 2.0);

          // A message of the wrong size fails that recv only, naming the sender.
          double two[2];
          const Error e =
              expect_error([&] { pg->recv(Tensor::of(two, 2), kAnySource, 11)->wait(); });
          CHILD_CHECK(e.code() == ErrorCode::invalid_argument &&
                      contains(e.what(), "rank 1 sent 8 bytes") &&
                      contains(e.what(), "expects 16 bytes"));
        } else {
          v = 10.0 * rank;
          pg->send(Tensor::of(&v, 1), 0, 5)->wait();
          double m1 = 70.0;
          double m2 = 71.0;
          pg->barrier()->wait();
          if (rank == 2) {
            pg->send(Tensor::of(&m1, 1), 0, 7)->wait();
            pg->send(Tensor::of(&m2, 1), 0, 7)->wait();
            pg->recv(Tensor::of(&go, 1), 0, 3)->wait();
          }
          v = rank;
          pg->send(Tensor::of(&v, 1), 0, 8)->wait();
          pg->send(Tensor::of(&v, 1), 0, 9)->wait();
          if (rank == 1) {
            pg->send(Tensor::of(&v, 1), 0, 11)->wait();
          }
        }
        int x = 1;
        pg->allreduce(Tensor::of(&x, 1))->wait();
        CHILD_CHECK(x == 3);
        // An argument check: a source that is neither a rank nor kAnySource.
        const Error bad = expect_error([&] { pg->recv(Tensor::of(&v, 1), -2, 1); });
        CHILD_CHECK(bad.code() == ErrorCode::invalid_argument &&
                    contains(bad.what(), "kAnySource"));
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("a recv from any source that times out says so and fails the group", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 2, loopback_options());
        double v = 0;
        if (rank == 0) {
          const Error e = expect_error(
              [&] { pg->recv(Tensor::of(&v, 1), kAnySource, 4, {.timeout = 300ms})->wait(); });
          CHILD_CHECK(e.code() == ErrorCode::timeout && contains(e.what(), "from any rank") &&
                      contains(e.what(), "waiting for a message from any rank"));
        } else {
          // Rank 0's timeout fails the group here too; this barrier ends with it.
          const Error e = expect_error([&] { pg->barrier({.timeout = 30s})->wait(); });
          CHILD_CHECK(contains(e.what(), "rank 0"));
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("large payloads: ring allreduce, several sockets per peer, pipelined broadcast",
          "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        TcpGroupOptions o = loopback_options();
        o.sockets_per_peer = 3;
        auto pg = make_tcp_group(child_store(server.port()), rank, 3, o);
        const std::size_t n = (6u << 20) + 7;  // 24 MiB of float32, not divisible by 3
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) {
          v[i] = static_cast<float>((i + static_cast<std::size_t>(rank)) % 13);
        }
        std::vector<float> out(n);
        pg->allreduce(Tensor::of(v.data(), n), Tensor::of(out.data(), n))->wait();
        for (std::size_t i = 0; i < n; i += 4099) {
          CHILD_CHECK(out[i] == static_cast<float>(i % 13 + (i + 1) % 13 + (i + 2) % 13));
        }
        pg->allreduce(Tensor::of(v.data(), n), {.op = ReduceOp::avg})->wait();
        CHILD_CHECK(v[n - 1] == out[n - 1] / 3.0f);
        if (rank != 1) {
          std::fill(v.begin(), v.end(), 0.0f);
        } else {
          std::fill(v.begin(), v.end(), 3.25f);
        }
        pg->broadcast(Tensor::of(v.data(), n), {.root = 1})->wait();
        CHILD_CHECK(v[0] == 3.25f && v[n - 1] == 3.25f);
        // then() runs once, on completion; wait_for never throws.
        // (Callbacks run after waiters are woken, so wait for the callback itself.)
        std::promise<bool> called;
        auto fired = called.get_future();
        auto w = pg->allreduce(Tensor::of(v.data(), n));
        w->then([&](Work& done) { called.set_value(done.is_success()); });
        CHILD_CHECK(w->wait_for(60s));
        w->wait();
        CHILD_CHECK(fired.wait_for(30s) == std::future_status::ready && fired.get());
      },
      120s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("data sockets to ranks on this host get the bounded send buffer, others autotune",
          "[tcp][mp]") {
  // The kernel doubles what SO_SNDBUF asks for; 100003 stays under any net.core.wmem_max.
  constexpr int kAsked = 100003;
  for (const bool one_host : {true, false}) {
    INFO((one_host ? "one host" : "two hosts"));
    StoreServerProcess server;
    const auto results = run_processes(
        2,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "tcp", 1);
          if (!one_host) {
            ::setenv("CHORUS_HOST_ID", fmt::format("host-{}", rank).c_str(), 1);
          }
          TcpGroupOptions o = loopback_options();
          o.sockets_per_peer = 2;
          o.local_send_buffer_bytes = kAsked;
          auto pg = make_tcp_group(child_store(server.port()), rank, 2, o);
          std::vector<float> v(1 << 20, 1.0f);
          pg->allreduce(Tensor::of(v.data(), v.size()))->wait();
          CHILD_CHECK(v[0] == 2.0f);
          const int bounded = sockets_with_send_buffer(2 * kAsked);
          const int expected = one_host ? o.sockets_per_peer : 0;
          if (bounded != expected) {
            throw ChildCheckFailed{fmt::format(
                "{} sockets have the bounded send buffer, expected {}", bounded, expected)};
          }
        },
        60s);
    REQUIRE_ALL_OK(results);
  }
}

}  // namespace chorus::test

namespace chorus::test {
namespace {

// The files of the chorus cache under `dir` whose names start with `prefix`.
int cache_files(const std::string& dir, const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/chorus", ec)) {
    n += e.path().filename().string().rfind(prefix, 0) == 0 ? 1 : 0;
  }
  return n;
}

TEST_CASE("groups over several hosts time the network between ring neighbours, then run clean",
          "[tcp][mp]") {
  char templ[] = "/tmp/chorus-price-test-XXXXXX";
  REQUIRE(::mkdtemp(templ) != nullptr);
  const std::string cache = templ;
  // 3 hosts of one rank (every ring step crosses), and two hosts of two where every other
  // step does; each with a probe forced, then with mixed settings (one rank skips): the
  // streams after the probe carry every size, and no rank waits for a probe that never comes.
  for (const int n : {3, 4}) {
    INFO("ranks " << n);
    StoreServerProcess server;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
          ::setenv("CHORUS_HOST_ID", fmt::format("host-{}", n == 3 ? rank : rank / 2).c_str(), 1);
          ::setenv("CHORUS_LINK_COSTS", "measure", 1);
          auto store = child_store(server.port());
          for (const bool mixed : {false, true}) {
            if (mixed && rank == 1) {
              ::setenv("CHORUS_NETWORK_PROBE", "off", 1);
            }
            TcpGroupOptions o = loopback_options();
            o.group.name = mixed ? "mixed" : "probed";
            auto pg = make_tcp_group(store, rank, n, o);
            for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
              std::vector<float> v(count, static_cast<float>(rank + 1));
              pg->allreduce(Tensor::of(v.data(), v.size()))->wait();
              const float want = static_cast<float>(n * (n + 1) / 2);
              CHILD_CHECK(v.front() == want && v.back() == want);
            }
            ::unsetenv("CHORUS_NETWORK_PROBE");
          }
        },
        120s);
    REQUIRE_ALL_OK(results);
  }
  // Each prober cached its link, by its host and its neighbour's address.
  CHECK(cache_files(cache, "network-") >= 1);
  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
}

}  // namespace
}  // namespace chorus::test
