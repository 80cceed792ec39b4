// SPDX-License-Identifier: BSD-3-Clause
// Every collective over real sockets for world sizes 1, 2, 3, 4 and 8: one process set per
// world size runs the whole matrix (every collective x every dtype with sum, every op for
// three dtypes; counts 0, 1, odd and not divisible by n; in place and out of place; the
// latency algorithms and the pipelined ones forced with tiny slices), each rank checking its
// own result against a locally computed reference. Exhaustive dtype x op coverage of the
// algorithms is in algorithms_test.cpp (loopback transport).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>

#include "tcp/collective_cases.hpp"
#include "tcp/issue_case.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

constexpr OpKind kCollectives[] = {OpKind::allreduce, OpKind::allgather, OpKind::reduce_scatter,
                                   OpKind::broadcast, OpKind::reduce,    OpKind::gather,
                                   OpKind::scatter,   OpKind::all_to_all};

// The matrix of cases every rank runs, in the same order.
std::vector<Case> matrix(int n) {
  std::vector<Case> cases;
  int salt = 0;
  auto add = [&](OpKind kind, DataType dt, ReduceOp op, std::size_t count) {
    for (bool in_place : {false, true}) {
      Case c{kind, n, count, dt, op, 0, in_place};
      if (kind == OpKind::all_to_all) {
        c.count = count * static_cast<std::size_t>(n);
      }
      if (kind == OpKind::broadcast || kind == OpKind::reduce || kind == OpKind::gather ||
          kind == OpKind::scatter) {
        c.root = salt++ % n;
      }
      cases.push_back(c);
    }
  };
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    for (OpKind kind : kCollectives) {
      for (DataType dt : kAllTypes) {
        add(kind, dt, ReduceOp::sum, count);
      }
      if (kind == OpKind::allreduce || kind == OpKind::reduce_scatter || kind == OpKind::reduce) {
        for (DataType dt : {DataType::int32, DataType::bfloat16, DataType::float64}) {
          for (ReduceOp op : kAllOps) {
            if (op != ReduceOp::sum) {
              add(kind, dt, op, count);
            }
          }
        }
      }
    }
  }
  return cases;
}

void run_matrix_on(int n) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto store = child_store(server.port());
        // Two groups: default thresholds (latency algorithms for these sizes), and one that
        // forces the pipelined algorithms with 40-byte slices (many slices per message).
        auto normal = make_tcp_group(store, rank, n, loopback_options());
        TcpGroupOptions piped = loopback_options();
        piped.small_allreduce_bytes = 0;
        piped.slice_bytes = 40;
        piped.sockets_per_peer = 2;
        auto pipelined = make_tcp_group(store, rank, n, piped);
        for (ProcessGroup* pg : {normal.get(), pipelined.get()}) {
          for (const Case& c : matrix(n)) {
            RankBuffers b = make_buffers(c, rank);
            issue_case(*pg, c, b)->wait();
            const std::string err = check_result(c, rank, b);
            if (!err.empty()) {
              throw ChildCheckFailed{
                  std::string(pg == normal.get() ? "[latency] " : "[pipelined] ") + err};
            }
          }
          pg->barrier()->wait();
          if (rank == 0 && std::getenv("CHORUS_TEST_VERBOSE")) {
            std::fprintf(stderr, "n=%d ran %zu cases\n", n, matrix(n).size());
          }
        }
      },
      150s);
  REQUIRE_ALL_OK(results);
}

}  // namespace

TEST_CASE("every collective over sockets, world size 1", "[tcp][mp]") { run_matrix_on(1); }
TEST_CASE("every collective over sockets, world size 2", "[tcp][mp]") { run_matrix_on(2); }
TEST_CASE("every collective over sockets, world size 3", "[tcp][mp]") { run_matrix_on(3); }
TEST_CASE("every collective over sockets, world size 4", "[tcp][mp]") { run_matrix_on(4); }
TEST_CASE("every collective over sockets, world size 8", "[tcp][mp]") { run_matrix_on(8); }

}  // namespace chorus::test
