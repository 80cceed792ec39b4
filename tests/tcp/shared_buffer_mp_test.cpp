// SPDX-License-Identifier: BSD-3-Clause
// SharedBuffers over real processes: with every rank's buffers in SharedBuffers, allreduce,
// reduce_scatter, allgather and broadcast map the peers' buffers (the direct algorithms
// without process_vm_readv) and give exact results for every dtype and op, in and out of
// place; ranks that pass different kinds of memory (some SharedBuffers, some not) get the
// right results, through the algorithm their keys agree on, or through direct forced, which maps
// the SharedBuffers and reaches the rest through process_vm_readv/writev; and where the group
// cannot map (sockets only) SharedBuffers are ordinary memory. A rank killed in a mapped op:
// tcp_shm_mp.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
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

// Element counts of at least 256 KiB (cpu::kSharedBufferMinBytes) per op, odd so that no chunk
// splits evenly; 3 MiB ones take many 128 KiB pieces.
std::size_t shared_count(DataType dt, std::size_t bytes) { return bytes / element_size(dt) + 3; }

// Every dtype and op when `every_dtype` (the reduction kernels are the same at any group size,
// so one size runs the whole matrix); otherwise three that cover float, 16-bit float and
// integer reductions, to exercise the chunking and peers of the group size.
std::vector<Case> shared_cases(int n, bool every_dtype) {
  std::vector<Case> cases;
  bool in_place = false;
  int root = 0;
  const std::vector<DataType> few_types = {DataType::float32, DataType::bfloat16, DataType::int32};
  const std::vector<ReduceOp> few_ops = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
  const std::vector<DataType> all_types(std::begin(kAllTypes), std::end(kAllTypes));
  const std::vector<ReduceOp> all_ops(std::begin(kAllOps), std::end(kAllOps));
  for (DataType dt : every_dtype ? all_types : few_types) {
    for (ReduceOp op : every_dtype ? all_ops : few_ops) {
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
  for (bool place : {false, true}) {
    cases.push_back({OpType::allreduce, n, shared_count(DataType::float32, 3 << 20),
                     DataType::float32, ReduceOp::sum, 0, place});
    cases.push_back({OpType::allreduce, n, shared_count(DataType::bfloat16, 3 << 20),
                     DataType::bfloat16, ReduceOp::avg, 0, place});
  }
  if (every_dtype) {
    // Out of place with the group's outputs at 32 MiB: the outputs are streamed (direct.cpp's
    // reduce_and_stream), unaligned at the odd count's end. With the whole matrix only: the
    // slowest cases under the sanitizers.
    const auto group_share = (std::size_t{32} << 20) / static_cast<std::size_t>(n);
    cases.push_back({OpType::allreduce, n, shared_count(DataType::float32, group_share),
                     DataType::float32, ReduceOp::sum, 0, false});
    cases.push_back({OpType::allreduce, n, shared_count(DataType::int32, group_share),
                     DataType::int32, ReduceOp::max, 0, false});
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

// The dtype and op matrix checks arithmetic, which the plain and ASan builds cover; under TSan
// (several times slower, and the subject there is the mapped path's synchronization, the same
// for every dtype) it would be most of the leg's longest test, so the TSan build runs the few.
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// Every dtype and op and the 32 MiB cases at 3 ranks (odd: no chunk splits evenly; under TSan the
// few); a few at 2 and 4.
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
          run_shared_cases(*pg, shared_cases(n, /*every_dtype=*/n == 3 && !kThreadSanitizer), rank);
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

// Every op with a direct algorithm, below and above 256 KiB, in and out of place.
std::vector<Case> mixed_cases(int n) {
  std::vector<Case> cases;
  int root = 0;
  for (std::size_t bytes : {std::size_t{4000}, std::size_t{256 * 1024}, std::size_t{1} << 20}) {
    for (bool place : {false, true}) {
      for (OpType kind : {OpType::allreduce, OpType::reduce_scatter}) {
        cases.push_back({kind, n, shared_count(DataType::float32, bytes), DataType::float32,
                         ReduceOp::sum, 0, place});
        cases.push_back({kind, n, shared_count(DataType::bfloat16, bytes), DataType::bfloat16,
                         ReduceOp::avg, 0, place});
      }
      for (OpType kind : {OpType::allgather, OpType::broadcast}) {
        cases.push_back({kind, n, shared_count(DataType::int32, bytes), DataType::int32,
                         ReduceOp::sum, root++ % n, place});
      }
    }
  }
  return cases;
}

void run_mixed_cases(ProcessGroup& pg, const std::vector<Case>& cases, int rank, bool shared) {
  for (const Case& c : cases) {
    RankBuffers b = make_buffers(c, rank, shared);
    issue_case(pg, c, b)->wait();
    if (const std::string err = check_result(c, rank, b); !err.empty()) {
      throw ChildCheckFailed{fmt::format(
          "{} ({}): {}", describe(OpSignature{c.kind, c.dtype, c.op, c.root, c.count, 0}),
          shared ? "SharedBuffers here" : "ordinary memory here", err)};
    }
  }
}

// 2 and 3 ranks (rank 0 shared, then alternating); 4 ranks mixed: the torch test case shared_4.
TEST_CASE("SharedBuffers on some ranks only: right results, then the mapped path again",
          "[shared_buffer][mp]") {
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    StoreServerProcess server;
    const auto results = run_processes(
        n,
        [&](int rank) {
          ::setenv("CHORUS_TRANSPORT", "shm", 1);
          auto store = child_store(server.port());
          auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
          // Rank 0 passes SharedBuffers, rank 1 ordinary memory, and so on alternately.
          run_mixed_cases(*pg, mixed_cases(n), rank, /*shared=*/rank % 2 == 0);
          // The agreement chose the rings: nothing of a peer was mapped.
          CHILD_CHECK(mapped_shared_buffers() == 0);
          // Every rank on SharedBuffers in the same group: the mapped path again.
          run_mixed_cases(*pg, mixed_cases(n), rank, /*shared=*/true);
          CHILD_CHECK(mapped_shared_buffers() > 0);
          // And the other way round.
          run_mixed_cases(*pg, mixed_cases(n), rank, /*shared=*/rank % 2 == 1);
          pg->barrier()->wait();
        },
        150s);
    REQUIRE_ALL_OK(results);
  }
}

TEST_CASE("SharedBuffers on some ranks only, direct forced: mapped peers and the others",
          "[shared_buffer][mp]") {
  constexpr int n = 3;
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        ::setenv("CHORUS_TRANSPORT", "shm", 1);
        ::setenv("CHORUS_ALGO",
                 "allreduce=direct,reduce_scatter=direct,allgather=direct,broadcast=direct", 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, n, loopback_options(60s));
        // Ranks 0 and 2 on SharedBuffers: every rank maps those and reaches rank 1's memory
        // through process_vm_readv/writev, in the same op.
        run_mixed_cases(*pg, mixed_cases(n), rank, /*shared=*/rank != 1);
        CHILD_CHECK(mapped_shared_buffers() > 0);
        pg->barrier()->wait();
      },
      150s);
  REQUIRE_ALL_OK(results);
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
        for (const Case& c : shared_cases(n, /*every_dtype=*/true)) {
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
