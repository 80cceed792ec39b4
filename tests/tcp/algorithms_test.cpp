// SPDX-License-Identifier: BSD-3-Clause
// Every algorithm over the in-memory LoopbackFabric: world sizes 1..8 x counts (0, 1, odd,
// not divisible by n, many slices) x every dtype x every op, in place and out of place, both
// the latency and the pipelined variant; plus signature mismatches.
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include <fmt/ranges.h>
#include <catch2/catch.hpp>

#include <chorus/errors.hpp>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/engine/executor.hpp"
#include "tcp/collective_cases.hpp"
#include "tcp/loopback_transport.hpp"

namespace chorus::test {
namespace {

constexpr std::size_t kCounts[] = {0, 1, 7, 33, 250};

struct Variant {
  std::size_t small_bytes;
  std::size_t slice_bytes;
};
// Latency algorithms (everything small) and pipelined ones with tiny slices (many slices).
constexpr Variant kVariants[] = {{1u << 30, 1u << 20}, {0, 40}};

cpu::CollectiveArgs args_for(const Case& c, const RankBuffers& rb, const Variant& v) {
  cpu::CollectiveArgs a;
  a.kind = c.kind;
  a.in = rb.in.data();
  a.out = rb.out.data();
  a.count = c.count;
  a.dtype = c.dtype;
  a.op = c.op;
  a.root = c.root;
  a.small_bytes = v.small_bytes;
  a.slice_bytes = v.slice_bytes;
  return a;
}

// Starts every rank's executor and moves messages until none can move. A rank whose op is
// built in two phases (Schedule::then(): direct forced builds its work once the peers' keys
// arrived) runs the rest as the engine does, once its first phase is done; every token of that
// phase has completed then, so the rest keeps the executor's token base.
void start_and_run(LoopbackFabric& fabric, std::vector<std::unique_ptr<cpu::Executor>>& execs,
                   std::vector<std::unique_ptr<cpu::Schedule>>& scheds,
                   const std::vector<OpSignature>& sigs, std::uint64_t token_base) {
  const auto go_on = [&](std::size_t r) {
    cpu::Schedule& s = *scheds[r];
    while (execs[r]->done()) {
      cpu::Schedule::Continuation next = s.take_continuation();
      if (!next) {
        return;
      }
      s.clear(s.dtype(), s.op());
      next(s);
      s.finalize_continuation(sigs[r]);
      execs[r]->restart(token_base);
      execs[r]->start();
    }
  };
  for (std::size_t r = 0; r < execs.size(); ++r) {
    execs[r]->start();
    go_on(r);
  }
  std::vector<LoopbackFabric::Completion> done;
  while (fabric.step(done)) {
    for (auto& d : done) {
      execs[static_cast<std::size_t>(d.rank)]->complete(d.token);
      go_on(static_cast<std::size_t>(d.rank));
    }
    done.clear();
  }
}

// Runs the case on n loopback ranks; returns "" or what went wrong.
std::string run_case(const Case& c, const Variant& v, std::uint32_t seed,
                     const std::vector<OpSignature>* sigs = nullptr,
                     std::vector<std::optional<cpu::SignatureMismatch>>* mismatches = nullptr,
                     const cpu::HostMap* hosts = nullptr,
                     cpu::AlgorithmId forced = cpu::AlgorithmId::automatic,
                     bool defer_one_sided = false) {
  LoopbackFabric fabric(c.n, seed, defer_one_sided);
  std::vector<RankBuffers> bufs;
  std::vector<OpSignature> rank_sigs;
  std::vector<cpu::ScratchArena> arenas(static_cast<std::size_t>(c.n));
  std::vector<std::unique_ptr<cpu::Schedule>> scheds;
  std::vector<std::unique_ptr<cpu::Executor>> execs;
  for (int r = 0; r < c.n; ++r) {
    bufs.push_back(make_buffers(c, r));
  }
  for (int r = 0; r < c.n; ++r) {
    auto s =
        std::make_unique<cpu::Schedule>(r, c.n, c.dtype, c.op, arenas[static_cast<std::size_t>(r)]);
    cpu::CollectiveArgs args = args_for(c, bufs[static_cast<std::size_t>(r)], v);
    args.hosts = hosts;
    args.forced = forced;
    // For direct: the fabric offers the one-sided capability (loopback_transport.hpp).
    args.peer_memory = forced == cpu::AlgorithmId::direct;
    args.one_sided = fabric.endpoint(r).one_sided();
    cpu::build_schedule(*s, args);
    rank_sigs.push_back(sigs ? (*sigs)[static_cast<std::size_t>(r)] : header_of(c, 7));
    s->finalize(rank_sigs.back());
    scheds.push_back(std::move(s));
    execs.push_back(
        std::make_unique<cpu::Executor>(fabric.endpoint(r), *scheds.back(), 1ull << 32));
  }
  start_and_run(fabric, execs, scheds, rank_sigs, 1ull << 32);
  if (!fabric.errors().empty()) {
    return c.describe() + ": " + fabric.errors().front();
  }
  bool any_failed = false;
  for (int r = 0; r < c.n; ++r) {
    auto& e = *execs[static_cast<std::size_t>(r)];
    if (mismatches) {
      mismatches->push_back(e.mismatch());
    }
    any_failed = any_failed || e.failed();
    if (!e.done() && !e.failed() && !mismatches) {
      return fmt::format("{}: rank {} did not finish (deadlock); pending:{}", c.describe(), r,
                         fabric.pending());
    }
  }
  if (mismatches || any_failed) {
    return any_failed ? "" : "no mismatch detected";
  }
  for (int r = 0; r < c.n; ++r) {
    std::string err = check_result(c, r, bufs[static_cast<std::size_t>(r)]);
    if (!err.empty()) {
      return err;
    }
  }
  return {};
}

// forced: the algorithm CHORUS_ALGO would force (automatic: the default choice). World sizes
// from_n..to_n; defer_one_sided: one-sided transfers complete later, out of order.
void run_matrix(OpType kind, bool reduces, cpu::AlgorithmId forced = cpu::AlgorithmId::automatic,
                int from_n = 1, int to_n = 8, bool defer_one_sided = false) {
  std::uint32_t seed = 1;
  int cases = 0;
  for (int n = from_n; n <= to_n; ++n) {
    for (std::size_t count : kCounts) {
      for (DataType dt : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (!reduces && op != ReduceOp::sum) {
            continue;
          }
          for (bool in_place : {false, true}) {
            for (const Variant& v : kVariants) {
              Case c{kind, n, count, dt, op, 0, in_place};
              if (kind == OpType::all_to_all) {
                c.count = count * static_cast<std::size_t>(n);
              }
              // Rooted ops: vary the root with the case so every position gets exercised.
              if (kind == OpType::broadcast || kind == OpType::reduce || kind == OpType::gather ||
                  kind == OpType::scatter) {
                c.root = static_cast<int>(seed % static_cast<std::uint32_t>(n));
              }
              const std::string err =
                  run_case(c, v, seed++, nullptr, nullptr, nullptr, forced, defer_one_sided);
              if (!err.empty()) {
                FAIL(err << " (small_bytes " << v.small_bytes << ", slice_bytes " << v.slice_bytes
                         << ")");
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases > 0);
}

}  // namespace

TEST_CASE("loopback allreduce: every world size, count, dtype and op", "[tcp][algorithms]") {
  run_matrix(OpType::allreduce, true);
}
TEST_CASE("loopback reduce_scatter: every world size, count, dtype and op", "[tcp][algorithms]") {
  run_matrix(OpType::reduce_scatter, true);
}
TEST_CASE("loopback reduce: every world size, count, dtype, op and root", "[tcp][algorithms]") {
  run_matrix(OpType::reduce, true);
}
TEST_CASE("loopback allgather", "[tcp][algorithms]") { run_matrix(OpType::allgather, false); }
TEST_CASE("loopback broadcast", "[tcp][algorithms]") { run_matrix(OpType::broadcast, false); }
TEST_CASE("loopback gather", "[tcp][algorithms]") { run_matrix(OpType::gather, false); }
TEST_CASE("loopback scatter", "[tcp][algorithms]") { run_matrix(OpType::scatter, false); }
TEST_CASE("loopback all_to_all", "[tcp][algorithms]") { run_matrix(OpType::all_to_all, false); }

TEST_CASE("loopback direct (single-copy) collectives: world sizes, counts, dtypes and ops",
          "[tcp][algorithms]") {
  run_matrix(OpType::allreduce, true, cpu::AlgorithmId::direct);
  run_matrix(OpType::reduce_scatter, true, cpu::AlgorithmId::direct);
  run_matrix(OpType::allgather, false, cpu::AlgorithmId::direct);
  run_matrix(OpType::broadcast, false, cpu::AlgorithmId::direct);
}

// The direct algorithms over a one-sided capability whose reads and writes complete later, in
// an order the fabric picks at random (deferred_one_sided.hpp), as an RDMA transport's would:
// the executor posts them and completes them by token, and only the schedule's dependencies
// order them.
TEST_CASE("loopback direct collectives over one-sided transfers that complete later, out of order",
          "[tcp][algorithms]") {
  const auto direct = cpu::AlgorithmId::direct;
  run_matrix(OpType::allreduce, true, direct, 2, 4, true);
  run_matrix(OpType::reduce_scatter, true, direct, 2, 4, true);
  run_matrix(OpType::allgather, false, direct, 2, 4, true);
  run_matrix(OpType::broadcast, false, direct, 2, 4, true);
  // Chunks of several pieces (direct.cpp's kPieceBytes), so that a scratch slot is read into
  // again while an earlier read into it may still be in flight.
  std::uint32_t seed = 1;
  for (int n = 2; n <= 4; ++n) {
    for (OpType kind : {OpType::allreduce, OpType::reduce_scatter}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        for (bool in_place : {false, true}) {
          const Case c{kind, n, 300007, DataType::float32, op, 0, in_place};
          CHECK(run_case(c, kVariants[0], seed++, nullptr, nullptr, nullptr, direct, true) == "");
        }
      }
    }
  }
}

// The engine keeps each rank's last Schedule and Executor and runs the next op in them
// (Schedule::clear, Executor::restart), so that a small op does not touch the heap. Ops of
// different kinds, sizes, dtypes and algorithms back to back in one pair per rank must give
// what fresh pairs give, and completions of an earlier op must not be taken for the new one's.
TEST_CASE("a schedule and executor run op after op when cleared and restarted",
          "[tcp][algorithms]") {
  struct Step {
    Case c;
    cpu::AlgorithmId forced;
    Variant v;
  };
  for (int n = 1; n <= 5; ++n) {
    const std::vector<Step> steps = {
        {{OpType::allreduce, n, 33, DataType::int32, ReduceOp::sum, 0, false},
         cpu::AlgorithmId::automatic,
         kVariants[1]},
        {{OpType::allgather, n, 7, DataType::float32, ReduceOp::sum, 0, true},
         cpu::AlgorithmId::automatic,
         kVariants[0]},
        {{OpType::allreduce, n, 1, DataType::float64, ReduceOp::max, 0, false},
         cpu::AlgorithmId::automatic,
         kVariants[0]},
        {{OpType::allreduce, n, 250, DataType::float32, ReduceOp::avg, 0, false},
         cpu::AlgorithmId::direct,
         kVariants[1]},
        {{OpType::broadcast, n, 250, DataType::uint8, ReduceOp::sum, n - 1, false},
         cpu::AlgorithmId::automatic,
         kVariants[1]},
        {{OpType::reduce_scatter, n, 0, DataType::int64, ReduceOp::prod, 0, false},
         cpu::AlgorithmId::automatic,
         kVariants[0]},
        {{OpType::allreduce, n, 33, DataType::bfloat16, ReduceOp::min, 0, true},
         cpu::AlgorithmId::halving_doubling,
         kVariants[1]},
    };
    LoopbackFabric fabric(n, 17);
    std::vector<cpu::ScratchArena> arenas(static_cast<std::size_t>(n));
    std::vector<std::unique_ptr<cpu::Schedule>> scheds;
    std::vector<std::unique_ptr<cpu::Executor>> execs;
    std::uint64_t epoch = 0;
    for (const Step& step : steps) {
      const Case& c = step.c;
      CAPTURE(c.describe(), cpu::algorithm_name(step.forced));
      ++epoch;
      std::vector<RankBuffers> bufs;
      for (int r = 0; r < n; ++r) {
        bufs.push_back(make_buffers(c, r));
      }
      for (int r = 0; r < n; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (scheds.size() < static_cast<std::size_t>(n)) {
          scheds.push_back(std::make_unique<cpu::Schedule>(r, n, c.dtype, c.op, arenas[i]));
        } else {
          arenas[i].reset();
          scheds[i]->clear(c.dtype, c.op);
        }
        cpu::CollectiveArgs args = args_for(c, bufs[i], step.v);
        args.forced = step.forced;
        args.peer_memory = step.forced == cpu::AlgorithmId::direct;
        args.one_sided = fabric.endpoint(r).one_sided();
        cpu::build_schedule(*scheds[i], args);
        scheds[i]->finalize(header_of(c, epoch));
        if (execs.size() < static_cast<std::size_t>(n)) {
          execs.push_back(
              std::make_unique<cpu::Executor>(fabric.endpoint(r), *scheds[i], epoch << 32));
        } else {
          CHECK(execs[i]->owns((epoch - 1) << 32));
          execs[i]->restart(epoch << 32);
          CHECK_FALSE(execs[i]->owns((epoch - 1) << 32));
          CHECK(execs[i]->owns(epoch << 32));
        }
      }
      const std::vector<OpSignature> sigs(static_cast<std::size_t>(n), header_of(c, epoch));
      start_and_run(fabric, execs, scheds, sigs, epoch << 32);
      REQUIRE(fabric.errors().empty());
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        REQUIRE(execs[static_cast<std::size_t>(r)]->done());
        CHECK(check_result(c, r, bufs[static_cast<std::size_t>(r)]) == "");
      }
    }
  }
}

TEST_CASE("loopback halving-doubling allreduce: every world size, count, dtype and op",
          "[tcp][algorithms]") {
  run_matrix(OpType::allreduce, true, cpu::AlgorithmId::halving_doubling);
}

TEST_CASE("loopback hierarchical allreduce: host layouts, counts, dtypes and ops",
          "[tcp][algorithms]") {
  // Host of each rank: contiguous hosts, interleaved ones, uneven ones, a host of one.
  const std::vector<std::vector<std::string>> layouts = {{"a", "a", "b", "b"},
                                                         {"a", "b", "a", "b"},
                                                         {"a", "a", "a", "b"},
                                                         {"a", "b", "a", "b", "c"},
                                                         {"x", "y", "y"},
                                                         {"a", "a", "a", "a", "b", "b", "b", "b"},
                                                         {"a", "b", "c", "a", "b", "c", "a", "b"}};
  std::uint32_t seed = 1;
  int cases = 0;
  for (const auto& layout : layouts) {
    const cpu::HostMap hosts = cpu::make_host_map(layout);
    const int n = static_cast<int>(layout.size());
    REQUIRE(hosts.mixed());
    for (std::size_t count : kCounts) {
      for (DataType dt : {DataType::float32, DataType::int64, DataType::bfloat16}) {
        for (ReduceOp op : kAllOps) {
          for (bool in_place : {false, true}) {
            for (const Variant& v : kVariants) {
              const Case c{OpType::allreduce, n, count, dt, op, 0, in_place};
              cpu::CollectiveArgs a;
              a.kind = c.kind;
              a.count = count;
              a.dtype = dt;
              a.op = op;
              a.hosts = &hosts;
              a.small_bytes = v.small_bytes;
              // Forced (whether it is the default is the cost model's call: selection tests);
              // it never runs for avg, which every phase would divide.
              a.forced = cpu::AlgorithmId::hierarchical;
              CHECK((cpu::select_algorithm(n, a) == cpu::AlgorithmId::hierarchical) ==
                    (op != ReduceOp::avg));
              const std::string err =
                  run_case(c, v, seed++, nullptr, nullptr, &hosts, cpu::AlgorithmId::hierarchical);
              if (!err.empty()) {
                FAIL(err << " (hosts " << fmt::format("{}", fmt::join(layout, ",")) << ")");
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases > 1000);
  // One host, or every rank alone: the flat algorithms.
  const cpu::HostMap one = cpu::make_host_map({"a", "a", "a"});
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c"});
  CHECK_FALSE(one.mixed());
  CHECK_FALSE(apart.mixed());
}

TEST_CASE("loopback barrier completes for every world size", "[tcp][algorithms]") {
  for (int n = 1; n <= 8; ++n) {
    Case c{OpType::barrier, n, 0, DataType::uint8, ReduceOp::sum, 0, false};
    REQUIRE(run_case(c, kVariants[0], static_cast<std::uint32_t>(n)).empty());
  }
}

TEST_CASE("loopback barrier: nobody leaves before everybody arrived", "[tcp][algorithms]") {
  // Run n-1 ranks only: none of them may complete.
  for (int n = 2; n <= 8; ++n) {
    for (int absent = 0; absent < n; ++absent) {
      LoopbackFabric fabric(n, 3);
      std::vector<cpu::ScratchArena> arenas(static_cast<std::size_t>(n));
      std::vector<std::unique_ptr<cpu::Schedule>> scheds;
      std::vector<std::unique_ptr<cpu::Executor>> execs;
      for (int r = 0; r < n; ++r) {
        auto s = std::make_unique<cpu::Schedule>(r, n, DataType::uint8, ReduceOp::sum,
                                                 arenas[static_cast<std::size_t>(r)]);
        cpu::build_barrier(*s, {});
        s->finalize(OpSignature{});
        scheds.push_back(std::move(s));
        execs.push_back(
            std::make_unique<cpu::Executor>(fabric.endpoint(r), *scheds.back(), 1ull << 32));
        if (r != absent) {
          execs.back()->start();
        }
      }
      std::vector<LoopbackFabric::Completion> done;
      while (fabric.step(done)) {
        for (auto& d : done) {
          execs[static_cast<std::size_t>(d.rank)]->complete(d.token);
        }
        done.clear();
      }
      for (int r = 0; r < n; ++r) {
        INFO("n=" << n << " absent=" << absent << " rank=" << r);
        CHECK_FALSE(execs[static_cast<std::size_t>(r)]->done());
      }
    }
  }
}

TEST_CASE("loopback: mismatched collectives are detected at the first message",
          "[tcp][algorithms]") {
  for (int n = 2; n <= 5; ++n) {
    for (int variant = 0; variant < 5; ++variant) {
      Case c{OpType::allreduce, n, 33, DataType::float32, ReduceOp::sum, 0, false};
      // Written out, not derived from the case: what every rank but rank 1 issued, and what
      // rank 1 issued instead.
      const OpSignature agreed{OpType::allreduce, DataType::float32, ReduceOp::sum, 0, 33, 3};
      const OpSignature odd[] = {
          {OpType::allreduce, DataType::float32, ReduceOp::sum, 0, 34, 3},
          {OpType::allreduce, DataType::float64, ReduceOp::sum, 0, 33, 3},
          {OpType::allreduce, DataType::float32, ReduceOp::max, 0, 33, 3},
          {OpType::allreduce, DataType::float32, ReduceOp::sum, 0, 33, 4},
          {OpType::broadcast, DataType::float32, ReduceOp::sum, 0, 33, 3},
      };
      std::vector<OpSignature> sigs(static_cast<std::size_t>(n), agreed);
      sigs[1] = odd[variant];
      std::vector<std::optional<cpu::SignatureMismatch>> mm;
      // The pipelined algorithms this test was written against (the cost model may pick
      // halving-doubling's folded form at 5 ranks for so small an op).
      const auto algorithm = n == 4 ? cpu::AlgorithmId::halving_doubling : cpu::AlgorithmId::ring;
      const std::string err = run_case(c, kVariants[1], 5, &sigs, &mm, nullptr, algorithm);
      INFO("n=" << n << " variant=" << variant << ": " << err);
      REQUIRE(err.empty());
      // Rank 1 sees its neighbours' headers; they see rank 1's.
      REQUIRE(mm[1].has_value());
      REQUIRE(mm[1]->theirs.has_value());
      CHECK(*mm[1]->theirs == sigs[static_cast<std::size_t>(mm[1]->peer)]);
      bool someone_named_rank1 = false;
      for (int r = 0; r < n; ++r) {
        const auto& m = mm[static_cast<std::size_t>(r)];
        if (r != 1 && m && m->peer == 1) {
          someone_named_rank1 = true;
          CHECK(*m->theirs == sigs[1]);
        }
      }
      CHECK(someone_named_rank1);
    }
  }
}

// meson test sets MALLOC_PERTURB_, which fills every allocation: scratch sized to slices
// instead of to the op made a 7-element reduce_scatter take 4 MiB per rank and this binary
// run for minutes. Every pipelined algorithm must ask for what the op needs.
TEST_CASE("scratch is sized to the op, not to the pipeline slice", "[tcp][algorithms]") {
  for (OpType kind : {OpType::allreduce, OpType::reduce_scatter, OpType::reduce, OpType::broadcast,
                      OpType::allgather, OpType::all_to_all, OpType::barrier}) {
    for (int n : {2, 3, 4, 8}) {
      Case c{kind, n, 7, DataType::float64, ReduceOp::sum, n - 1, true};
      if (kind == OpType::all_to_all) {
        c.count = 7 * static_cast<std::size_t>(n);
      }
      for (const Variant& v : {Variant{0, 1u << 20}, Variant{1u << 30, 1u << 20}}) {
        for (int r = 0; r < n; ++r) {
          RankBuffers rb = make_buffers(c, r);
          cpu::ScratchArena arena;
          cpu::Schedule s(r, n, c.dtype, c.op, arena);
          cpu::build_schedule(s, args_for(c, rb, v));
          INFO(c.describe() << " rank " << r << " small_bytes " << v.small_bytes);
          // The largest legitimate need: a few op-sized buffers (recursive doubling keeps one
          // per round, all_to_all stages n blocks), each rounded up to 64 bytes.
          CHECK(arena.capacity() <= 4096);
        }
      }
    }
  }
}

TEST_CASE("schedule: interleave merges a later phase into an earlier one, lag items behind",
          "[tcp][algorithms]") {
  cpu::ScratchArena arena;
  cpu::Schedule s(0, 2, DataType::uint8, ReduceOp::sum, arena);
  std::uint8_t buf[8] = {};
  std::vector<cpu::TaskId> a;
  std::vector<cpu::TaskId> b;
  for (int i = 0; i < 5; ++i) {
    a.push_back(s.send(1, buf, 1));
  }
  const std::size_t split = s.sends_to(1);
  for (int i = 0; i < 3; ++i) {
    b.push_back(s.send(1, buf, 1));
  }
  const cpu::TaskId r0 = s.recv(1, buf, 1);
  s.interleave(1, true, split, 1);
  CHECK(s.send_fifo(1) == std::vector<cpu::TaskId>{a[0], a[1], b[0], a[2], b[1], a[3], b[2], a[4]});
  CHECK(s.recv_fifo(1) == std::vector<cpu::TaskId>{r0});  // the other direction is untouched
  // A lag past the end of the first phase keeps the order.
  s.interleave(1, false, 1, 5);
  CHECK(s.recv_fifo(1) == std::vector<cpu::TaskId>{r0});
}

namespace {
// Records what the executor posts, in order: ('s' | 'r', peer, token).
struct RecordingTransport : cpu::Transport {
  struct Post {
    char what;
    int peer;
    std::uint64_t token;
    bool operator==(const Post& o) const {
      return what == o.what && peer == o.peer && token == o.token;
    }
  };
  void post_send(int peer, const void*, std::size_t, std::uint64_t token) override {
    posts.push_back({'s', peer, token});
  }
  void post_recv(int peer, void*, std::size_t, std::uint64_t token) override {
    posts.push_back({'r', peer, token});
  }
  std::vector<Post> posts;
};
}  // namespace

// A header sent alone costs a system call, and the peer a wake-up, per step of a small op; the
// executor holds it until the data send behind it is ready, or until it is released.
TEST_CASE("executor: a signature header waits for the first data send to its peer",
          "[tcp][algorithms]") {
  const OpSignature sig{OpType::allreduce, DataType::uint8, ReduceOp::sum, 0, 1, 7};
  for (const bool release_first : {false, true}) {
    INFO("release_first=" << release_first);
    cpu::ScratchArena arena;
    // Rank 0 of 3: receives from 2, then sends to 1 what came (a dependent send); sends to 2
    // at once.
    cpu::Schedule s(0, 3, DataType::uint8, ReduceOp::sum, arena);
    std::uint8_t in = 1;
    std::uint8_t got = 0;
    const cpu::TaskId recv2 = s.recv(2, &got, 1);
    const cpu::TaskId send1 = s.send(1, &got, 1, {recv2});
    const cpu::TaskId send2 = s.send(2, &in, 1);
    s.finalize(sig);
    const cpu::TaskId header1 = s.send_fifo(1).front();
    const cpu::TaskId header2 = s.send_fifo(2).front();
    REQUIRE(s.tasks()[static_cast<std::size_t>(header1)].header);
    // 1 data byte: the header takes the stream's padding (no pad message).
    CHECK(s.tasks()[static_cast<std::size_t>(header1)].size == 2 * cpu::kStreamAlign - 1);
    CHECK(s.send_fifo(1).size() == 2);
    RecordingTransport t;
    constexpr std::uint64_t kBase = std::uint64_t{1} << 32;
    auto token = [&](cpu::TaskId id) { return kBase + static_cast<std::uint64_t>(id); };
    cpu::Executor ex(t, s, kBase);
    ex.start();
    // Peer 2's first data send is ready: header and data go together. Peer 1's header waits.
    auto sends_to = [&](int peer) {
      std::vector<std::uint64_t> out;
      for (const auto& p : t.posts) {
        if (p.what == 's' && p.peer == peer) {
          out.push_back(p.token);
        }
      }
      return out;
    };
    CHECK(sends_to(2) == std::vector<std::uint64_t>{token(header2), token(send2)});
    CHECK(sends_to(1).empty());
    CHECK(ex.holds_headers());
    if (release_first) {
      ex.release_headers();
      CHECK(sends_to(1) == std::vector<std::uint64_t>{token(header1)});
      CHECK_FALSE(ex.holds_headers());
    }
    // The receive from 2 completes (its header first, then its data): the send to 1 is ready.
    const cpu::TaskId header_in2 = s.recv_fifo(2).front();
    std::memcpy(s.tasks()[static_cast<std::size_t>(header_in2)].dst, encode(sig).data(),
                kSignatureBytes);
    ex.complete(token(header_in2));
    ex.complete(token(recv2));
    const std::size_t before = t.posts.size();
    CHECK(sends_to(1) == std::vector<std::uint64_t>{token(header1), token(send1)});
    if (!release_first) {
      // Posted back to back, in one call: the transport writes them together.
      REQUIRE(before >= 2);
      CHECK(t.posts[before - 2] == RecordingTransport::Post{'s', 1, token(header1)});
      CHECK(t.posts[before - 1] == RecordingTransport::Post{'s', 1, token(send1)});
    }
    CHECK_FALSE(ex.holds_headers());
    CHECK_FALSE(ex.failed());
  }
}

// The kernel copies socket bytes at their offset in the stream, so every op keeps each stream
// 64-byte aligned (schedule.hpp, kStreamAlign).
TEST_CASE("stream framing: data aligned behind a 64-byte header, the total a multiple of 64",
          "[tcp][algorithms]") {
  using cpu::kStreamAlign;
  for (const std::size_t data :
       {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{64}, std::size_t{4000},
        cpu::kPadMessageMinBytes - 1, cpu::kPadMessageMinBytes, cpu::kPadMessageMinBytes + 4,
        std::size_t{1} << 26, (std::size_t{1} << 26) + 36}) {
    INFO(data << " data bytes");
    const cpu::StreamFraming f = cpu::stream_framing(data);
    CHECK((f.header_bytes + data + f.pad_bytes) % kStreamAlign == 0);
    CHECK(f.header_bytes >= kStreamAlign);
    CHECK(f.header_bytes < 2 * kStreamAlign);
    CHECK(f.pad_bytes < kStreamAlign);
    if (data >= cpu::kPadMessageMinBytes) {
      CHECK(f.header_bytes == kStreamAlign);  // the data itself starts aligned
    } else {
      CHECK(f.pad_bytes == 0);  // a small op sends no extra message
    }
  }
}

TEST_CASE("schedule: every op's stream to and from each peer is a multiple of 64 bytes",
          "[tcp][algorithms]") {
  const OpType kinds[] = {OpType::allreduce, OpType::allgather, OpType::reduce_scatter,
                          OpType::broadcast, OpType::reduce,    OpType::gather,
                          OpType::scatter,   OpType::all_to_all};
  std::size_t padded = 0;
  for (const int n : {2, 3, 4}) {
    for (const OpType kind : kinds) {
      for (const DataType dtype : {DataType::uint8, DataType::float32, DataType::float64}) {
        for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
          // Buffers for the largest shape any kind takes (n blocks of count elements).
          std::vector<std::byte> in(count * 8 * static_cast<std::size_t>(n));
          std::vector<std::byte> out(in.size());
          for (int rank = 0; rank < n; ++rank) {
            INFO(to_string(kind) << " " << to_string(dtype) << " x " << count << ", rank " << rank
                                 << " of " << n);
            cpu::ScratchArena arena;
            cpu::Schedule s(rank, n, dtype, ReduceOp::sum, arena);
            cpu::CollectiveArgs a;
            a.kind = kind;
            a.in = in.data();
            a.out = out.data();
            a.count = count;
            a.dtype = dtype;
            a.small_bytes = 256 * 1024;
            cpu::build_schedule(s, a);
            s.finalize(OpSignature{kind, dtype, ReduceOp::sum, 0, count, 1});
            for (int p = 0; p < n; ++p) {
              for (const auto* fifo : {&s.send_fifo(p), &s.recv_fifo(p)}) {
                std::size_t bytes = 0;
                for (const cpu::TaskId id : *fifo) {
                  const cpu::Task& t = s.tasks()[static_cast<std::size_t>(id)];
                  bytes +=
                      t.kind == cpu::TaskKind::recv_reduce ? t.size * element_size(dtype) : t.size;
                }
                CHECK(bytes % cpu::kStreamAlign == 0);
                if (fifo->empty()) {
                  continue;
                }
                const cpu::Task& first = s.tasks()[static_cast<std::size_t>(fifo->front())];
                CHECK(first.header);
                CHECK(first.size >= cpu::kStreamAlign);
                const cpu::Task& last = s.tasks()[static_cast<std::size_t>(fifo->back())];
                const std::size_t pad = last.pad ? last.size : 0;
                const cpu::StreamFraming framing = cpu::stream_framing(bytes - first.size - pad);
                CHECK(first.size == framing.header_bytes);
                CHECK(pad == framing.pad_bytes);
                if (last.pad && last.kind == cpu::TaskKind::send) {
                  ++padded;
                  const auto* zeros = static_cast<const std::uint8_t*>(last.src);
                  CHECK(std::all_of(zeros, zeros + last.size, [](auto b) { return b == 0; }));
                }
              }
            }
          }
        }
      }
    }
  }
  CHECK(padded > 0);  // the odd sizes above do need pads
}

// An op whose algorithm the memory kinds choose (build_memory_agreement) sends its keys inside
// the signature headers: on ordinary memory it posts exactly the messages of the algorithm
// alone, each header longer by the keys, plus a header alone to each peer the algorithm does
// not talk to (docs/results.md, "the agreement's cost").
TEST_CASE("an agreed op carries the keys in its headers: no message of their own",
          "[tcp][algorithms][shared_buffer]") {
  cpu::CmaOneSided one_sided;
  std::vector<float> in(64 * 1024), out(in.size());  // 256 KiB: agreed
  for (const int n : {2, 3, 4, 5}) {
    for (const int rank : {0, n - 1}) {
      INFO(n << " ranks, rank " << rank);
      cpu::ScratchArena arena, plain_arena;
      cpu::CollectiveArgs a;
      a.kind = OpType::allreduce;
      a.in = in.data();
      a.out = out.data();
      a.count = in.size();
      a.dtype = DataType::float32;
      a.peer_memory = true;
      a.one_sided = &one_sided;
      REQUIRE(cpu::needs_memory_agreement(n, a));
      const OpSignature sig{OpType::allreduce, DataType::float32, ReduceOp::sum, 0, a.count, 1};
      cpu::Schedule agreed(rank, n, a.dtype, a.op, plain_arena);
      cpu::build_schedule(agreed, a);
      agreed.finalize(sig);
      // The same algorithm, chosen without an agreement.
      cpu::BufferKeys keys[8];
      cpu::CollectiveArgs known = a;
      known.keys = keys;
      cpu::Schedule plain(rank, n, a.dtype, a.op, arena);
      cpu::build_schedule(plain, known);
      plain.finalize(sig);
      const cpu::MemoryKey mine_in = one_sided.register_buffer(a.in, a.count * sizeof(float));
      for (int p = 0; p < n; ++p) {
        if (p == rank) {
          continue;
        }
        INFO("peer " << p);
        for (const bool sends : {true, false}) {
          const auto& fifo = sends ? agreed.send_fifo(p) : agreed.recv_fifo(p);
          const auto& alone = sends ? plain.send_fifo(p) : plain.recv_fifo(p);
          REQUIRE(!fifo.empty());
          CHECK(fifo.size() == std::max<std::size_t>(alone.size(), 1));
          const cpu::Task& header = agreed.tasks()[static_cast<std::size_t>(fifo.front())];
          CHECK(header.header);
          CHECK(header.size == cpu::kStreamAlign + sizeof(cpu::BufferKeys));
          if (sends) {
            const auto* carried = static_cast<const std::uint8_t*>(header.src) + cpu::kStreamAlign;
            CHECK(std::memcmp(carried, mine_in.bytes.data(), mine_in.bytes.size()) == 0);
          }
        }
      }
    }
  }
}

// Links are made on demand (link_connector.hpp), so the peers a rank's schedules name are the
// links it opens. A 4096-rank data-parallel job (small and large allreduce, barrier) must need
// O(log N) of them per rank, not N - 1. Checked on the schedules themselves, for ranks at the
// edges and in the middle (4096 real processes do not fit on this machine; tcp_links_mp counts
// the sockets of 64).
TEST_CASE("at 4096 ranks, allreduce and barrier schedules name O(log N) peers per rank",
          "[tcp][algorithms][links]") {
  constexpr int kRanks = 4096;
  constexpr int kLog2 = 12;
  std::vector<float> small_in(2), small_out(2);
  std::vector<float> large_in(kRanks * 64), large_out(kRanks * 64);  // 1 MiB: the ring
  for (int rank : {0, 1, 2047, 2048, 4095}) {
    std::set<int> peers;
    auto add = [&](OpType kind, const float* in, float* out, std::size_t count) {
      cpu::ScratchArena arena;
      cpu::Schedule s(rank, kRanks, DataType::float32, ReduceOp::sum, arena);
      cpu::CollectiveArgs a;
      a.kind = kind;
      a.in = in;
      a.out = out;
      a.count = count;
      a.dtype = DataType::float32;
      a.small_bytes = 256 * 1024;
      cpu::build_schedule(s, a);
      for (const cpu::Task& t : s.tasks()) {
        if (t.kind == cpu::TaskKind::send || t.kind == cpu::TaskKind::recv) {
          peers.insert(t.peer);
        }
      }
    };
    add(OpType::allreduce, small_in.data(), small_out.data(), small_in.size());
    add(OpType::allreduce, large_in.data(), large_out.data(), large_in.size());
    add(OpType::barrier, nullptr, nullptr, 0);
    INFO("rank " << rank << " names " << peers.size() << " peers");
    CHECK(peers.size() <= static_cast<std::size_t>(2 + 3 * kLog2));
  }
}

}  // namespace chorus::test
