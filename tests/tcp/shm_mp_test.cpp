// SPDX-License-Identifier: BSD-3-Clause
// The shared-memory transport over real processes: every collective with messages larger than
// the rings (wrap-around, partial chunks), groups split over "hosts" with CHORUS_HOST_ID (shm
// inside a host, tcp across), the failure contract (a killed rank is named at once, a stopped
// one at its timeout) and that no segment is left in /dev/shm, whatever the exit.
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tcp/collective_cases.hpp"
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

std::shared_ptr<Work> issue(ProcessGroup& pg, const Case& c, RankBuffers& b) {
  switch (c.kind) {
    case OpKind::allreduce:
      return pg.allreduce(b.in, b.out, {.op = c.op});
    case OpKind::allgather:
      return pg.allgather(b.in, b.out);
    case OpKind::reduce_scatter:
      return pg.reduce_scatter(b.in, b.out, {.op = c.op});
    case OpKind::broadcast:
      return pg.broadcast(b.in, {.root = c.root});
    case OpKind::reduce:
      return pg.reduce(b.in, b.out, {.op = c.op, .root = c.root});
    case OpKind::gather:
      return pg.gather(b.in, b.out, {.root = c.root});
    case OpKind::scatter:
      return pg.scatter(b.in, b.out, {.root = c.root});
    case OpKind::all_to_all:
      return pg.all_to_all(b.in, b.out);
    case OpKind::barrier:
      return pg.barrier();
  }
  return nullptr;
}

// Sizes around the 1 MiB ring and the 64 KiB chunk: a message that wraps the ring several
// times, one just over a chunk, and an odd small one.
std::vector<Case> large_cases(int n) {
  std::vector<Case> cases;
  int root = 0;
  for (std::size_t count : {std::size_t{700'001}, std::size_t{16'385}, std::size_t{3}}) {
    for (OpKind kind :
         {OpKind::allreduce, OpKind::allgather, OpKind::reduce_scatter, OpKind::broadcast,
          OpKind::reduce, OpKind::gather, OpKind::scatter, OpKind::all_to_all}) {
      for (bool in_place : {false, true}) {
        Case c{kind, n, count, DataType::float32, ReduceOp::sum, root++ % n, in_place};
        if (kind == OpKind::all_to_all) {
          c.count = count / 4 * static_cast<std::size_t>(n);
        }
        cases.push_back(c);
      }
    }
    cases.push_back({OpKind::allreduce, n, count, DataType::int64, ReduceOp::max, 0, false});
    cases.push_back({OpKind::allreduce, n, count, DataType::bfloat16, ReduceOp::sum, 0, true});
  }
  return cases;
}

void run_cases(ProcessGroup& pg, const std::vector<Case>& cases, int rank) {
  for (const Case& c : cases) {
    RankBuffers b = make_buffers(c, rank);
    issue(pg, c, b)->wait();
    const std::string err = check_result(c, rank, b);
    if (!err.empty()) {
      throw ChildCheckFailed{err};
    }
  }
  pg.barrier()->wait();
}

void run_large_on(int n, const char* transport) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", transport, 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        CHILD_CHECK(maps_shared_segment() == (std::string(transport) == "shm" && n > 1));
        run_cases(*pg, large_cases(n), rank);
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
        run_cases(*pg, large_cases(n), rank);
        // A host of one: no segment.
        ::setenv("CHORUS_HOST_ID", fmt::format("alone-{}", rank).c_str(), 1);
        auto alone = make_tcp_group(store, rank, n, loopback_options());
        run_cases(*alone, {{OpKind::allreduce, n, 100'003, DataType::float32}}, rank);
      },
      150s);
  REQUIRE_ALL_OK(results);
  CHECK(segments_of(results).empty());
}

TEST_CASE("over shared memory a killed rank is named at once and leaves no segment",
          "[shm][mp][failure]") {
  StoreServerProcess server;
  constexpr int n = 3;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", "shm", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        std::vector<float> data(8 << 20, 1.0f);  // 32 MiB: many ring turns
        pg->barrier()->wait();
        auto work = pg->allreduce(Tensor::of(data.data(), data.size()));
        if (rank == 2) {
          ::kill(::getpid(), SIGKILL);
        }
        const auto t0 = Clock::now();
        const Error e = expect_error([&] { work->wait(); });
        const double took = seconds_since(t0);
        std::fprintf(stderr, "rank %d: the failure of rank 2 noticed after %.3f s\n", rank, took);
        if (!(e.code() == ErrorCode::network && names(e, 2) && took < 5.0)) {
          throw ChildCheckFailed{fmt::format("after {:.3f} s: {}", took, e.what())};
        }
      },
      90s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
  CHECK(segments_of(results).empty());
}

TEST_CASE("over shared memory a stopped rank times out on schedule, named", "[shm][mp][failure]") {
  StoreServerProcess server;
  constexpr int n = 3;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", "shm", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(2s));
        std::vector<float> data(1 << 20, 1.0f);
        pg->barrier()->wait();
        if (rank == 2) {
          store->set("pid2", std::to_string(::getpid()));
          ::raise(SIGSTOP);  // rank 0 SIGKILLs it once both survivors checked their errors
          return;
        }
        const auto t0 = Clock::now();
        const Error e =
            expect_error([&] { pg->allreduce(Tensor::of(data.data(), data.size()))->wait(); });
        const double took = seconds_since(t0);
        if (!(e.code() == ErrorCode::timeout && names(e, 2) && took < 2.0 + 0.2 + 3.0)) {
          throw ChildCheckFailed{fmt::format("after {:.3f} s: {}", took, e.what())};
        }
        store->set(fmt::format("checked/{}", rank), "1");
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
  CHECK(segments_of(results).empty());
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
