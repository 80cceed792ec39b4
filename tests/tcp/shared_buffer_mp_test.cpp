// SPDX-License-Identifier: BSD-3-Clause
// SharedBuffers over real processes: with every rank's buffers in SharedBuffers, allreduce,
// reduce_scatter, allgather and broadcast map the peers' buffers (the direct algorithms
// without process_vm_readv) and give exact results for every dtype and op, in and out of
// place; a rank that passes ordinary memory where the others pass SharedBuffers fails the op
// on every rank with a mismatch that says what to do; and where the group cannot map (sockets
// only) SharedBuffers are ordinary memory. A rank killed in a mapped op: tcp_shm_mp.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "support/shared_buffer_maps.hpp"
#include "tcp/collective_cases.hpp"
#include "tcp/issue_case.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Element counts of at least 256 KiB (tcp::kSharedBufferMinBytes) per op, odd so that no chunk
// splits evenly; 3 MiB ones take many 128 KiB pieces.
std::size_t shared_count(DataType dt, std::size_t bytes) { return bytes / element_size(dt) + 3; }

std::vector<Case> shared_cases(int n) {
  std::vector<Case> cases;
  bool in_place = false;
  int root = 0;
  for (DataType dt : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (OpType kind : {OpType::allreduce, OpType::reduce_scatter}) {
        cases.push_back({kind, n, shared_count(dt, 256 * 1024), dt, op, 0, in_place = !in_place});
      }
    }
    for (OpType kind : {OpType::allgather, OpType::broadcast}) {
      for (bool place : {false, true}) {
        cases.push_back(
            {kind, n, shared_count(dt, 256 * 1024), dt, ReduceOp::sum, root++ % n, place});
      }
    }
  }
  // Out of place with the group's outputs at 32 MiB: the outputs are streamed (direct.cpp's
  // reduce_and_stream), unaligned at the odd count's end.
  const auto group_share = (std::size_t{32} << 20) / static_cast<std::size_t>(n);
  cases.push_back({OpType::allreduce, n, shared_count(DataType::float32, group_share),
                   DataType::float32, ReduceOp::sum, 0, false});
  cases.push_back({OpType::allreduce, n, shared_count(DataType::int32, group_share),
                   DataType::int32, ReduceOp::max, 0, false});
  for (bool place : {false, true}) {
    cases.push_back({OpType::allreduce, n, shared_count(DataType::float32, 3 << 20),
                     DataType::float32, ReduceOp::sum, 0, place});
    cases.push_back({OpType::allreduce, n, shared_count(DataType::bfloat16, 3 << 20),
                     DataType::bfloat16, ReduceOp::avg, 0, place});
  }
  return cases;
}

void run_shared_cases(ProcessGroup& pg, const std::vector<Case>& cases, int rank) {
  for (const Case& c : cases) {
    RankBuffers b = make_buffers(c, rank, /*shared=*/true);
    issue_case(pg, c, b)->wait();
    if (const std::string err = check_result(c, rank, b); !err.empty()) {
      throw ChildCheckFailed{fmt::format(
          "{}: {}", describe(OpSignature{c.kind, c.dtype, c.op, c.root, c.count, 0}), err)};
    }
  }
  pg.barrier()->wait();
}

}  // namespace

TEST_CASE("SharedBuffers: the mapped single-copy path, every dtype and op, 2, 3 and 4 ranks",
          "[shared_buffer][mp]") {
  for (int n : {2, 3, 4}) {
    INFO(n << " ranks");
    StoreServerProcess server;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "shm", 1);
          auto store = child_store(server.port());
          auto pg = make_tcp_group(store, rank, n, loopback_options());
          CHILD_CHECK(mapped_shared_buffers() == 0);
          run_shared_cases(*pg, shared_cases(n), rank);
          // Every buffer of this rank is gone: what is still mapped are the peers' buffers,
          // kept for the next op. None would be there had the ops used the rings.
          CHILD_CHECK(mapped_shared_buffers() > 0);
          pg.reset();
          CHILD_CHECK(mapped_shared_buffers() == 0);  // the group took its mappings along
        },
        150s);
    REQUIRE_ALL_OK(results);
  }
}

TEST_CASE("SharedBuffers on some ranks only: a mismatch on every rank that says what to do",
          "[shared_buffer][mp][failure]") {
  for (int n : {2, 4}) {
    INFO(n << " ranks");
    StoreServerProcess server;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "shm", 1);
          auto store = child_store(server.port());
          auto pg = make_tcp_group(store, rank, n, loopback_options(20s));
          const Case c{OpType::allreduce, n, 100'003, DataType::float32};
          RankBuffers b = make_buffers(c, rank, /*shared=*/rank != n - 1);
          const auto t0 = Clock::now();
          const Error e = expect_error([&] { issue_case(*pg, c, b)->wait(); });
          const double took = seconds_since(t0);
          std::fprintf(stderr, "rank %d: failed after %.3f s: %s\n", rank, took, e.what());
          CHILD_CHECK(took < 10.0);
          // Every rank, those that saw the mismatch and those aborted by them, has the reason.
          CHILD_CHECK(contains(e.what(), "SharedBuffer memory on every rank or on none"));
          CHILD_CHECK(e.code() == ErrorCode::invalid_argument);
        },
        60s);
    REQUIRE_ALL_OK(results);
  }
}

TEST_CASE("SharedBuffers over sockets only are ordinary memory, mixed with other memory",
          "[shared_buffer][mp]") {
  StoreServerProcess server;
  constexpr int n = 2;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", "tcp", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options());
        for (const Case& c : shared_cases(n)) {
          if (c.dtype != DataType::float32 && c.dtype != DataType::int8) {
            continue;
          }
          RankBuffers b = make_buffers(c, rank, /*shared=*/rank == 0);
          issue_case(*pg, c, b)->wait();
          if (const std::string err = check_result(c, rank, b); !err.empty()) {
            throw ChildCheckFailed{err};
          }
        }
        CHILD_CHECK(mapped_shared_buffers() == 0);  // nothing of the peer's was mapped
      },
      120s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
