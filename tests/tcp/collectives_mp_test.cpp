// SPDX-License-Identifier: BSD-3-Clause
// Every collective over real sockets for world sizes 1, 2, 3, 4 and 8: one process set per
// world size runs the whole matrix (every collective x every dtype with sum, every op for
// three dtypes; counts 0, 1, odd and not divisible by n; in place and out of place; the
// latency algorithms and the pipelined ones forced with tiny slices), each rank checking its
// own result against a locally computed reference. Exhaustive dtype x op coverage of the
// algorithms is in algorithms_test.cpp (loopback transport).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include "tcp/collective_cases.hpp"
#include "tcp/issue_case.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

constexpr OpType kCollectives[] = {OpType::allreduce, OpType::allgather, OpType::reduce_scatter,
                                   OpType::broadcast, OpType::reduce,    OpType::gather,
                                   OpType::scatter,   OpType::all_to_all};

// The matrix of cases every rank runs, in the same order.
std::vector<Case> matrix(int n) {
  std::vector<Case> cases;
  int salt = 0;
  auto add = [&](OpType kind, DataType dt, ReduceOp op, std::size_t count) {
    for (bool in_place : {false, true}) {
      Case c{kind, n, count, dt, op, 0, in_place};
      if (kind == OpType::all_to_all) {
        c.count = count * static_cast<std::size_t>(n);
      }
      if (kind == OpType::broadcast || kind == OpType::reduce || kind == OpType::gather ||
          kind == OpType::scatter) {
        c.root = salt++ % n;
      }
      cases.push_back(c);
    }
  };
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    for (OpType kind : kCollectives) {
      for (DataType dt : kAllTypes) {
        add(kind, dt, ReduceOp::sum, count);
      }
      if (kind == OpType::allreduce || kind == OpType::reduce_scatter || kind == OpType::reduce) {
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

// The variable-size collectives: uneven blocks (an empty one from 3 ranks on), small and
// several-KiB blocks, in place and out of place, sum and max; the values are exact integers.
std::int32_t value_of(int rank, std::size_t i) {
  return static_cast<std::int32_t>(rank * 100000 + static_cast<int>(i));
}
std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

void run_variable_size_on(int n) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, n, loopback_options());
        const auto ur = static_cast<std::size_t>(rank);
        for (std::size_t scale : {1, 700}) {
          std::vector<std::size_t> counts;
          for (int q = 0; q < n; ++q) {
            counts.push_back(q == 1 && n > 2 ? 0 : scale * static_cast<std::size_t>(q + 1));
          }
          const std::vector<std::size_t> off = offsets_of(counts);
          const std::size_t total = off.back();
          for (bool in_place : {false, true}) {
            std::vector<std::int32_t> in(counts[ur]);
            std::vector<std::int32_t> out(total, -1);
            for (std::size_t i = 0; i < in.size(); ++i) {
              in[i] = value_of(rank, i);
              out[off[ur] + i] = in_place ? in[i] : -1;
            }
            const Tensor tin = in_place ? Tensor::of(out.data() + off[ur], counts[ur])
                                        : Tensor::of(in.data(), in.size());
            pg->allgatherv(tin, Tensor::of(out.data(), total), counts)->wait();
            for (int q = 0; q < n; ++q) {
              for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i) {
                CHILD_CHECK(out[off[static_cast<std::size_t>(q)] + i] == value_of(q, i));
              }
            }
          }
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
            for (bool in_place : {false, true}) {
              std::vector<std::int32_t> in(total);
              std::vector<std::int32_t> out(counts[ur], -1);
              for (std::size_t k = 0; k < total; ++k) {
                in[k] = value_of(rank, k);
              }
              const Tensor tout = in_place ? Tensor::of(in.data() + off[ur], counts[ur])
                                           : Tensor::of(out.data(), out.size());
              pg->reduce_scatterv(Tensor::of(in.data(), total), tout, counts, {.op = op})->wait();
              for (std::size_t i = 0; i < counts[ur]; ++i) {
                std::int32_t want = 0;
                for (int q = 0; q < n; ++q) {
                  want = op == ReduceOp::sum ? want + value_of(q, off[ur] + i)
                                             : std::max(want, value_of(q, off[ur] + i));
                }
                CHILD_CHECK((in_place ? in[off[ur] + i] : out[i]) == want);
              }
            }
          }
          // Rank i sends rank j sent(i, j) elements: 0 for some pairs, uneven for the others.
          auto sent = [&](int i, int j) {
            return scale * static_cast<std::size_t>((i + 2 * j) % 3);
          };
          std::vector<std::size_t> in_counts;
          std::vector<std::size_t> out_counts;
          for (int q = 0; q < n; ++q) {
            in_counts.push_back(sent(rank, q));
            out_counts.push_back(sent(q, rank));
          }
          const std::vector<std::size_t> in_off = offsets_of(in_counts);
          const std::vector<std::size_t> out_off = offsets_of(out_counts);
          std::vector<std::int32_t> in(in_off.back());
          std::vector<std::int32_t> out(out_off.back(), -1);
          for (std::size_t k = 0; k < in.size(); ++k) {
            in[k] = value_of(rank, k);
          }
          pg->all_to_allv(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()),
                          in_counts, out_counts)
              ->wait();
          for (int q = 0; q < n; ++q) {
            // Where rank q's block for this rank starts in rank q's input.
            std::size_t at_q = 0;
            for (int j = 0; j < rank; ++j) {
              at_q += sent(q, j);
            }
            for (std::size_t k = 0; k < out_counts[static_cast<std::size_t>(q)]; ++k) {
              CHILD_CHECK(out[out_off[static_cast<std::size_t>(q)] + k] == value_of(q, at_q + k));
            }
          }
        }
        // Float data through the same path, and a wrong count caught on the calling rank.
        std::vector<float> f(static_cast<std::size_t>(n) * 2, -1.0f);
        const std::vector<std::size_t> twos(static_cast<std::size_t>(n), 2);
        std::vector<float> mine = {static_cast<float>(rank), 0.5f};
        pg->allgatherv(Tensor::of(mine.data(), 2), Tensor::of(f.data(), f.size()), twos)->wait();
        for (int q = 0; q < n; ++q) {
          CHILD_CHECK(f[2 * static_cast<std::size_t>(q)] == static_cast<float>(q));
        }
        try {
          pg->allgatherv(Tensor::of(mine.data(), 1), Tensor::of(f.data(), f.size()), twos);
          CHILD_CHECK(false);
        } catch (const InvalidArgument&) {
        }
        pg->barrier()->wait();
      },
      90s);
  REQUIRE_ALL_OK(results);
}

// Coalesced ops (OpDescriptor::ins/outs): allreduce, allgather and reduce_scatter over
// tensors of different sizes (empty ones, one past a pipeline slice), in and out of place;
// each is one op with one sequence number.
void run_coalesced_on(int n) {
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, n, loopback_options());
        const auto un = static_cast<std::size_t>(n);
        const auto ur = static_cast<std::size_t>(rank);
        const std::vector<std::size_t> sizes = {5, 0, 1, 70'001, 3, 0};
        // Element k of part p on rank q: distinct across parts and ranks.
        auto value = [](int q, std::size_t p, std::size_t k) { return value_of(q, p * 7 + k); };
        auto describe = [&](OpType type, ReduceOp op, bool in_place,
                            std::vector<std::vector<std::int32_t>>& ins,
                            std::vector<std::vector<std::int32_t>>& outs) {
          OpDescriptor d{.type = type, .op = op};
          for (std::size_t p = 0; p < sizes.size(); ++p) {
            const std::size_t c = sizes[p];
            const std::size_t in_count = type == OpType::reduce_scatter ? un * c : c;
            const std::size_t out_count = type == OpType::allgather ? un * c : c;
            ins.emplace_back(in_count);
            outs.emplace_back(out_count, -1);
            for (std::size_t k = 0; k < in_count; ++k) {
              ins[p][k] = value(rank, p, k);
            }
            Tensor in = Tensor::of(ins[p].data(), in_count);
            Tensor out = Tensor::of(outs[p].data(), out_count);
            if (in_place && type == OpType::allreduce) {
              out = in;
            } else if (in_place && type == OpType::allgather) {
              std::copy(ins[p].begin(), ins[p].end(), outs[p].begin() + ur * c);
              in = out.slice(ur * c, c);
            } else if (in_place && type == OpType::reduce_scatter) {
              out = in.slice(ur * c, c);
            }
            d.ins.push_back(in);
            d.outs.push_back(out);
          }
          return d;
        };
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
          for (bool in_place : {false, true}) {
            std::vector<std::vector<std::int32_t>> ins, outs;
            const auto before = pg->barrier();
            pg->run(describe(OpType::allreduce, op, in_place, ins, outs))->wait();
            CHILD_CHECK(pg->barrier()->seq() == before->seq() + 2);  // one op, one seq
            for (std::size_t p = 0; p < sizes.size(); ++p) {
              for (std::size_t k = 0; k < sizes[p]; ++k) {
                std::int32_t want = op == ReduceOp::sum ? 0 : value(0, p, k);
                for (int q = 0; q < n; ++q) {
                  want =
                      op == ReduceOp::sum ? want + value(q, p, k) : std::max(want, value(q, p, k));
                }
                CHILD_CHECK((in_place ? ins[p][k] : outs[p][k]) == want);
              }
            }
            std::vector<std::vector<std::int32_t>> rs_in, rs_out;
            pg->run(describe(OpType::reduce_scatter, op, in_place, rs_in, rs_out))->wait();
            for (std::size_t p = 0; p < sizes.size(); ++p) {
              const std::size_t c = sizes[p];
              for (std::size_t k = 0; k < c; ++k) {
                std::int32_t want = op == ReduceOp::sum ? 0 : value(0, p, ur * c + k);
                for (int q = 0; q < n; ++q) {
                  const std::int32_t v = value(q, p, ur * c + k);
                  want = op == ReduceOp::sum ? want + v : std::max(want, v);
                }
                CHILD_CHECK((in_place ? rs_in[p][ur * c + k] : rs_out[p][k]) == want);
              }
            }
          }
        }
        for (bool in_place : {false, true}) {
          std::vector<std::vector<std::int32_t>> ins, outs;
          pg->run(describe(OpType::allgather, ReduceOp::sum, in_place, ins, outs))->wait();
          for (std::size_t p = 0; p < sizes.size(); ++p) {
            for (int q = 0; q < n; ++q) {
              for (std::size_t k = 0; k < sizes[p]; ++k) {
                CHILD_CHECK(outs[p][static_cast<std::size_t>(q) * sizes[p] + k] == value(q, p, k));
              }
            }
          }
        }
        // Only empty tensors: an op of count 0, still one seq on every rank.
        OpDescriptor empty{.type = OpType::allreduce};
        empty.ins = {Tensor(), Tensor()};
        empty.outs = {Tensor(), Tensor()};
        pg->run(empty)->wait();
        pg->barrier()->wait();
      },
      90s);
  REQUIRE_ALL_OK(results);
}

}  // namespace

TEST_CASE("coalesced collectives over sockets, world sizes 1 to 4", "[tcp][mp]") {
  for (int n : {1, 2, 3, 4}) {
    run_coalesced_on(n);
  }
}

TEST_CASE("variable-size collectives over sockets, world sizes 1 to 4", "[tcp][mp]") {
  for (int n : {1, 2, 3, 4}) {
    run_variable_size_on(n);
  }
}

TEST_CASE("every collective over sockets, world size 1", "[tcp][mp]") { run_matrix_on(1); }
TEST_CASE("every collective over sockets, world size 2", "[tcp][mp]") { run_matrix_on(2); }
TEST_CASE("every collective over sockets, world size 3", "[tcp][mp]") { run_matrix_on(3); }
TEST_CASE("every collective over sockets, world size 4", "[tcp][mp]") { run_matrix_on(4); }
TEST_CASE("every collective over sockets, world size 8", "[tcp][mp]") { run_matrix_on(8); }

}  // namespace chorus::test
