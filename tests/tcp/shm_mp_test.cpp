// SPDX-License-Identifier: BSD-3-Clause
// The shared-memory transport over real processes: every collective with messages larger than
// the rings (wrap-around, partial chunks), groups split over "hosts" with CHORUS_HOST_ID (shm
// inside a host, tcp across), a killed rank named at once, and that no segment is left in
// /dev/shm, whatever the exit. The rest of the failure contract over shared memory is
// tcp_failures_mp and tcp_fault_mp, which run on it by default (and again on sockets: _tcp).
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chorus/shared_buffer.hpp>

#include "tcp/collective_cases.hpp"
#include "tcp/issue_case.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Whether this process maps a chorus segment (it has no name any more: "(deleted)").
bool maps_shared_segment() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/chorus-") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Segments in /dev/shm created by one of these processes.
std::vector<std::string> segments_of(const std::vector<ChildResult>& results) {
  std::vector<std::string> found;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    return found;
  }
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    for (const ChildResult& r : results) {
      if (name.rfind(fmt::format("chorus-{}-", r.pid), 0) == 0) {
        found.push_back(name);
      }
    }
  }
  ::closedir(dir);
  return found;
}

const std::vector<OpType> kEveryKind = {
    OpType::allreduce, OpType::allgather, OpType::reduce_scatter, OpType::broadcast,
    OpType::reduce,    OpType::gather,    OpType::scatter,        OpType::all_to_all};

// Sizes around the 1 MiB ring and the 64 KiB chunk: a message that wraps the ring several
// times, one just over a chunk, and an odd small one; for the kinds given (a run that forces
// an algorithm needs only the kinds that algorithm serves).
std::vector<Case> large_cases(int n, const std::vector<OpType>& kinds) {
  std::vector<Case> cases;
  int root = 0;
  const bool allreduce = std::find(kinds.begin(), kinds.end(), OpType::allreduce) != kinds.end();
  for (std::size_t count : {std::size_t{700'001}, std::size_t{16'385}, std::size_t{3}}) {
    for (OpType kind : kinds) {
      for (bool in_place : {false, true}) {
        Case c{kind, n, count, DataType::float32, ReduceOp::sum, root++ % n, in_place};
        if (kind == OpType::all_to_all) {
          c.count = count / 4 * static_cast<std::size_t>(n);
        }
        cases.push_back(c);
      }
    }
    if (allreduce) {
      cases.push_back({OpType::allreduce, n, count, DataType::int64, ReduceOp::max, 0, false});
      cases.push_back({OpType::allreduce, n, count, DataType::bfloat16, ReduceOp::sum, 0, true});
    }
  }
  return cases;
}

void run_cases(ProcessGroup& pg, const std::vector<Case>& cases, int rank) {
  for (const Case& c : cases) {
    RankBuffers b = make_buffers(c, rank);
    issue_case(pg, c, b)->wait();
    const std::string err = check_result(c, rank, b);
    if (!err.empty()) {
      throw ChildCheckFailed{err};
    }
  }
  pg.barrier()->wait();
}

// The reductions that read straight out of the rings (ring allreduce, ring reduce_scatter, chain
// reduce): every dtype and op, in and out of place. A 5-byte broadcast before each case leaves
// the rings at an odd offset, so each case starts on the padding to the next message boundary;
// the 2.4 MB case turns the rings over, cut into chunks and slices.
std::vector<Case> reduce_on_arrival_cases(int n) {
  std::vector<Case> cases;
  bool in_place = false;
  int root = 0;
  for (DataType dt : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (OpType kind : {OpType::allreduce, OpType::reduce_scatter, OpType::reduce}) {
        cases.push_back({OpType::broadcast, n, 5, DataType::int8, ReduceOp::sum, 0, false});
        cases.push_back({kind, n, 20'011, dt, op, root++ % n, in_place = !in_place});
      }
    }
  }
  cases.push_back({OpType::allreduce, n, 300'007, DataType::float64, ReduceOp::avg, 0, false});
  return cases;
}

void run_large_on(int n, const char* transport, const char* algorithms = nullptr,
                  const std::vector<OpType>& kinds = kEveryKind) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", transport, 1);
        if (algorithms != nullptr) {
          ::setenv("CHORUS_ALGO", algorithms, 1);
        }
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        CHILD_CHECK(maps_shared_segment() == (std::string(transport) == "shm" && n > 1));
        run_cases(*pg, large_cases(n, kinds), rank);
      },
      150s);
  REQUIRE_ALL_OK(results);
  CHECK(segments_of(results).empty());
}

}  // namespace

TEST_CASE("every collective over shared memory, messages larger than the rings", "[shm][mp]") {
  run_large_on(2, "shm");
  run_large_on(3, "shm");
  run_large_on(4, "shm");
}

TEST_CASE("receives reduced straight out of the rings: every dtype and op, rings at odd offsets",
          "[shm][mp]") {
  // The ring (or halving-doubling) and the chain at every size (else the board, recursive
  // doubling and the tree would take these counts).
  const std::pair<int, const char*> runs[] = {{2, "allreduce=ring,reduce=chain"},
                                              {3, "allreduce=ring,reduce=chain"},
                                              {4, "allreduce=halving_doubling,reduce=chain"}};
  for (const auto& run : runs) {
    const int n = run.first;
    const char* algorithms = run.second;
    INFO(algorithms);
    StoreServerProcess server;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "shm", 1);
          ::setenv("CHORUS_ALGO", algorithms, 1);
          auto store = child_store(server.port());
          auto pg = make_tcp_group(store, rank, n, loopback_options());
          run_cases(*pg, reduce_on_arrival_cases(n), rank);
        },
        150s);
    REQUIRE_ALL_OK(results);
    CHECK(segments_of(results).empty());
  }
}

TEST_CASE("the single-copy algorithms over real processes, every size and op they have",
          "[shm][mp]") {
  // Below their default thresholds too (the 3-element and 16385-element cases), in and out of
  // place, at 2 ranks as well (where they are never the default).
  const char* direct = "allreduce=direct,allgather=direct,reduce_scatter=direct,broadcast=direct";
  const std::vector<OpType> kinds = {OpType::allreduce, OpType::allgather, OpType::reduce_scatter,
                                     OpType::broadcast};
  run_large_on(2, "shm", direct, kinds);
  run_large_on(4, "shm", direct, kinds);
}

TEST_CASE("halving-doubling allreduce over real processes, sockets and shared memory",
          "[shm][mp]") {
  // Forced below its default sizes too; 3 ranks fold a pair first.
  const char* hd = "allreduce=halving_doubling";
  run_large_on(4, "shm", hd, {OpType::allreduce});
  run_large_on(3, "tcp", hd, {OpType::allreduce});
}

TEST_CASE("CHORUS_TRANSPORT=tcp keeps same-host ranks on sockets", "[shm][mp]") {
  run_large_on(2, "tcp");
}

TEST_CASE("a group over two hosts: shared memory inside each, tcp between them", "[shm][mp]") {
  StoreServerProcess server;
  constexpr int n = 4;
  const auto results = run_processes(
      n,
      [&](int rank) {
        // Ranks 0 and 2 on one host, 1 and 3 on the other: every ring step crosses hosts.
        ::setenv("CHORUS_HOST_ID", rank % 2 == 0 ? "host-a" : "host-b", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        CHILD_CHECK(maps_shared_segment());
        run_cases(*pg, large_cases(n, kEveryKind), rank);
        // A host of one: no segment.
        ::setenv("CHORUS_HOST_ID", fmt::format("alone-{}", rank).c_str(), 1);
        auto alone = make_tcp_group(store, rank, n, loopback_options());
        run_cases(*alone, {{OpType::allreduce, n, 100'003, DataType::float32}}, rank);
      },
      150s);
  REQUIRE_ALL_OK(results);
  CHECK(segments_of(results).empty());
}

TEST_CASE("over shared memory a killed rank is named at once and leaves no segment",
          "[shm][mp][failure]") {
  // Through the rings, through the single-copy algorithm (which finds the dead peer's memory
  // gone and waits for its sockets' news: Engine::held_failure_), and through SharedBuffers
  // that the survivors mapped (their writes into the dead rank's buffer still land, in pages
  // the mapping keeps).
  for (const char* algorithm : {"allreduce=ring", "allreduce=direct", "SharedBuffer"}) {
    INFO(algorithm);
    const bool shared = std::string(algorithm) == "SharedBuffer";
    StoreServerProcess server;
    constexpr int n = 3;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "shm", 1);
          if (!shared) {
            ::setenv("CHORUS_ALGO", algorithm, 1);
          }
          auto store = child_store(server.port());
          auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
          constexpr std::size_t kCount = 8 << 20;  // 32 MiB: many ring turns
          std::vector<float> data(shared ? 0 : kCount, 1.0f);
          SharedBuffer memory(shared ? kCount * sizeof(float) : 0);
          const Tensor t(shared ? memory.data() : data.data(), kCount, DataType::float32);
          // A survivor may still be finishing the barrier when rank 2 dies: either op may be
          // the one that fails.
          const auto t0 = Clock::now();
          const Error e = expect_error([&] {
            pg->allreduce(t)->wait();  // maps the peers' SharedBuffers (or warms the path)
            pg->barrier()->wait();
            if (rank == 2 && shared) {
              // A mapped 32 MiB allreduce can finish (about 10 ms) before a kill issued after
              // it lands, if this thread loses its core meanwhile: the survivors are in the op
              // when rank 2 dies, waiting for its buffers.
              ::kill(::getpid(), SIGKILL);
            }
            auto work = pg->allreduce(t);
            if (rank == 2) {
              ::kill(::getpid(), SIGKILL);
            }
            work->wait();
          });
          const double took = seconds_since(t0);
          std::fprintf(stderr, "%s, rank %d: the failure of rank 2 noticed after %.3f s\n",
                       algorithm, rank, took);
          if (!(e.code() == ErrorCode::network && names(e, 2) && took < 5.0)) {
            throw ChildCheckFailed{fmt::format("after {:.3f} s: {} (peers {}): {}", took,
                                               to_string(e.code()), e.context().peers.size(),
                                               e.what())};
          }
        },
        90s);
    INFO(describe(results));
    CHECK(results[0].ok());
    CHECK(results[1].ok());
    CHECK(results[2].signal == SIGKILL);
    CHECK(segments_of(results).empty());
  }
}

TEST_CASE("bad CHORUS_TRANSPORT and CHORUS_HOST_ID values are named", "[shm][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      1,
      [&](int) {
        auto store = child_store(server.port());
        ::setenv("CHORUS_TRANSPORT", "infiniband", 1);
        Error e = expect_error([&] { make_tcp_group(store, 0, 1, loopback_options()); });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument &&
                    contains(e.what(), "CHORUS_TRANSPORT='infiniband'"));
        ::unsetenv("CHORUS_TRANSPORT");
        ::setenv("CHORUS_HOST_ID", "two words", 1);
        e = expect_error([&] { make_tcp_group(store, 0, 1, loopback_options()); });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument &&
                    contains(e.what(), "CHORUS_HOST_ID='two words'"));
      },
      30s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
