// SPDX-License-Identifier: BSD-3-Clause
// The engine's failure protocol on the in-memory MemoryFabric: dead, silent and stalled peers,
// probes and their replies, mismatches, abort racing completion, timeout ordering, root-cause
// propagation under every arrival order, and the CHORUS_FAULT decorator. One process, one
// engine thread per rank; every wait is bounded.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/logging.hpp>

#include "core/format.hpp"
#include "cpu/engine/engine.hpp"
#include "cpu/transports/fault/fault_transport.hpp"
#include "cpu/transports/forwarding_transport.hpp"
#include "cpu/transports/small_ops.hpp"
#include "cpu/transports/transport_stack.hpp"
#include "tcp/deferred_one_sided.hpp"
#include "tcp/memory_fabric.hpp"

namespace chorus::test {
namespace {

using namespace std::chrono_literals;
using cpu::Engine;
using cpu::FrameType;
using cpu::Op;

constexpr auto kBound = 20s;  // a failure that should be immediate must arrive well before this

struct Group {
  explicit Group(int n, MemoryFabric& fabric, std::vector<int> engines = {},
                 Duration peer_timeout = Duration::zero())
      : n(n), peer_timeout(peer_timeout) {
    if (engines.empty()) {
      engines.resize(static_cast<std::size_t>(n));
      std::iota(engines.begin(), engines.end(), 0);
    }
    ranks.resize(static_cast<std::size_t>(n));
    for (int r : engines) {
      start(r, fabric.endpoint(r));
    }
  }
  void start(int r, std::unique_ptr<cpu::EngineTransport> t) {
    cpu::EngineConfig c;
    c.rank = r;
    c.size = n;
    c.group = "fabric";
    c.peer_timeout = peer_timeout;
    ranks[static_cast<std::size_t>(r)] = std::make_unique<Engine>(std::move(c), std::move(t));
  }
  Engine& operator[](int r) { return *ranks[static_cast<std::size_t>(r)]; }
  int n;
  Duration peer_timeout;
  std::vector<std::unique_ptr<Engine>> ranks;
};

// driven: the Work lends its waiting thread to the engine's loop (LoopRunner::drive), as a small
// op of a CpuProcessGroup does. direct_through: the direct algorithm, forced, through this
// one-sided capability.
std::shared_ptr<WorkState> allreduce(Engine& e, float* data, std::size_t count, std::uint64_t seq,
                                     Duration timeout = 60s, bool driven = false,
                                     cpu::OneSided* direct_through = nullptr) {
  auto o = std::make_unique<Op>();
  o->kind = Op::Kind::collective;
  o->args.kind = OpType::allreduce;
  o->args.in = data;
  o->args.out = data;
  o->args.count = count;
  o->args.dtype = DataType::float32;
  o->args.op = ReduceOp::sum;
  o->args.small_bytes = 256 * 1024;
  o->args.slice_bytes = 1 << 20;
  if (direct_through != nullptr) {
    o->args.forced = cpu::AlgorithmId::direct;
    o->args.peer_memory = true;
    o->args.one_sided = direct_through;
  }
  o->sig.kind = OpType::allreduce;
  o->sig.seq = seq;
  o->sig.dtype = DataType::float32;
  o->sig.count = count;
  o->sig.redop = ReduceOp::sum;
  o->bytes = count * sizeof(float);
  o->call.seq = seq;
  o->call.name = "allreduce";
  o->call.timeout = timeout;
  o->call.deadline = Deadline::after(timeout);
  o->work = std::make_shared<WorkState>("allreduce", seq);
  if (driven) {
    o->work->drive_with(e.driver());
  }
  auto w = o->work;
  e.submit(std::move(o));
  return w;
}

// Waits (bounded) and returns the error; fails the test if the op succeeded or hung.
Error error_of(const std::shared_ptr<WorkState>& w) {
  REQUIRE(w->wait_for(kBound));
  try {
    w->wait();
  } catch (const Error& e) {
    return e;
  }
  FAIL("the op succeeded but should have failed");
  throw std::logic_error("unreachable");
}

bool names(const Error& e, int rank) {
  const auto& p = e.context().peers;
  return std::find(p.begin(), p.end(), rank) != p.end() &&
         std::string(e.what()).find(fmt::format("rank {} (mem:{})", rank, rank)) !=
             std::string::npos;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// Whole engines, the direct allreduce forced, over a one-sided capability whose transfers
// complete at later polls, in random order (deferred_one_sided.hpp): the engine hands their
// tokens to the executor as it does a send's. Counts of one piece and of several.
TEST_CASE("fabric: direct allreduce over one-sided transfers that complete later, out of order",
          "[tcp][fabric]") {
  for (int n = 2; n <= 4; ++n) {
    CAPTURE(n);
    MemoryFabric fabric(n);
    std::vector<DeferredOneSidedTransport*> deferred;
    std::vector<std::unique_ptr<Engine>> engines;
    for (int r = 0; r < n; ++r) {
      auto t = std::make_unique<DeferredOneSidedTransport>(fabric.endpoint(r),
                                                           static_cast<std::uint32_t>(r + 1));
      deferred.push_back(t.get());
      cpu::EngineConfig c;
      c.rank = r;
      c.size = n;
      c.group = "fabric";
      engines.push_back(std::make_unique<Engine>(std::move(c), std::move(t)));
    }
    std::uint64_t seq = 0;
    for (std::size_t count : {std::size_t{1000}, std::size_t{200003}}) {
      ++seq;
      std::vector<std::vector<float>> data;
      std::vector<std::shared_ptr<WorkState>> w;
      for (int r = 0; r < n; ++r) {
        data.emplace_back(count, static_cast<float>(r + 1));
      }
      for (int r = 0; r < n; ++r) {
        w.push_back(allreduce(*engines[static_cast<std::size_t>(r)],
                              data[static_cast<std::size_t>(r)].data(), count, seq, 60s, false,
                              deferred[static_cast<std::size_t>(r)]->one_sided()));
      }
      const auto expected = static_cast<float>(n * (n + 1) / 2);
      for (int r = 0; r < n; ++r) {
        const auto i = static_cast<std::size_t>(r);
        REQUIRE(w[i]->wait_for(kBound));
        w[i]->wait();
        CHECK(std::all_of(data[i].begin(), data[i].end(), [&](float v) { return v == expected; }));
        CHECK(deferred[i]->errors().empty());
        CHECK(deferred[i]->completed() > 0);  // the reads and writes went through it
      }
    }
  }
}

TEST_CASE("fabric: a healthy allreduce completes on every rank", "[tcp][fabric]") {
  MemoryFabric fabric(3);
  Group g(3, fabric);
  std::vector<std::vector<float>> data(3, std::vector<float>(1000, 1.0f));
  std::vector<std::shared_ptr<WorkState>> w;
  for (int r = 0; r < 3; ++r) {
    w.push_back(allreduce(g[r], data[static_cast<std::size_t>(r)].data(), 1000, 1));
  }
  for (int r = 0; r < 3; ++r) {
    REQUIRE(w[static_cast<std::size_t>(r)]->wait_for(kBound));
    w[static_cast<std::size_t>(r)]->wait();
    CHECK(data[static_cast<std::size_t>(r)][999] == 3.0f);
  }
}

TEST_CASE("fabric: a dead peer fails every survivor at once, naming it", "[tcp][fabric][failure]") {
  MemoryFabric fabric(3);
  Group g(3, fabric, {0, 1});
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
  auto w0 = allreduce(g[0], a.data(), a.size(), 1);
  auto w1 = allreduce(g[1], b.data(), b.size(), 1);
  fabric.crash(2);
  for (auto& w : {w0, w1}) {
    const Error e = error_of(w);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::network);
    CHECK(names(e, 2));
  }
}

TEST_CASE("fabric: a stalled peer is named by the status probe after the timeout",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(3);
  Group g(3, fabric);
  fabric.stall(2);  // rank 2 neither reads nor writes: no data, no probe replies
  std::vector<std::vector<float>> data(3, std::vector<float>(100, 1.0f));
  auto w0 = allreduce(g[0], data[0].data(), 100, 1, 300ms);
  auto w1 = allreduce(g[1], data[1].data(), 100, 1, 300ms);
  auto w2 = allreduce(g[2], data[2].data(), 100, 1, 60s);
  for (auto& w : {w0, w1}) {
    const Error e = error_of(w);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::timeout);
    CHECK(names(e, 2));
    CHECK(contains(e.what(), "did not answer a status probe"));
  }
  fabric.unstall(2);  // it then hears the notices
  const Error e2 = error_of(w2);
  CHECK(e2.code() == ErrorCode::timeout);
  CHECK(names(e2, 2));
}

TEST_CASE("fabric: a silent link (dropped, nobody told) ends in a timeout naming the silent rank",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(2);
  Group g(2, fabric, {0});
  fabric.drop_link(0, 1);
  std::vector<float> a(10, 1.0f);
  const Error e = error_of(allreduce(g[0], a.data(), a.size(), 1, 200ms));
  INFO(e.what());
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(names(e, 1));
  CHECK(contains(e.what(), "did not answer a status probe"));
  CHECK(fabric.sent(0, 1, FrameType::status_request).size() == 1);
}

TEST_CASE("fabric: probe replies name the rank that has not issued the op",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(3);
  Group g(3, fabric);
  std::vector<float> a(10, 1.0f), b(10, 1.0f), c(10, 1.0f);
  // Rank 2 runs seq 1 with the others, then never issues seq 2.
  auto w = {allreduce(g[0], a.data(), 10, 1), allreduce(g[1], b.data(), 10, 1),
            allreduce(g[2], c.data(), 10, 1)};
  for (auto& x : w) {
    REQUIRE(x->wait_for(kBound));
  }
  // 3 s: the probe's grace is then 300 ms, room for rank 2's reply on a loaded machine.
  auto w0 = allreduce(g[0], a.data(), 10, 2, 3s);
  auto w1 = allreduce(g[1], b.data(), 10, 2, 3s);
  for (auto& x : {w0, w1}) {
    const Error e = error_of(x);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::timeout);
    CHECK(names(e, 2));
    CHECK(e.context().seq == 2);
  }
  // Rank 2 answered the probes (it was alive, just behind), and says its last seq was 1. Which
  // of ranks 0 and 1 probed is timing: the first to reach its deadline fails the group, and the
  // other may hear of it before its own deadline.
  auto replies = fabric.sent(2, 0, FrameType::status_reply);
  for (auto& r : fabric.sent(2, 1, FrameType::status_reply)) {
    replies.push_back(std::move(r));
  }
  REQUIRE(!replies.empty());
  const auto reply = cpu::decode_status(replies.front());
  REQUIRE(reply);
  CHECK(reply->issued_seq == 1);
  const Error e0 = error_of(w0);
  CHECK(contains(e0.what(), "has not issued this op yet (its last collective is seq 1)"));
}

TEST_CASE("fabric: mismatched collectives fail every rank, naming both signatures",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(3);
  Group g(3, fabric);
  std::vector<float> a(20, 1.0f), b(20, 1.0f), c(20, 1.0f);
  auto w0 = allreduce(g[0], a.data(), 20, 1);
  auto w1 = allreduce(g[1], b.data(), 10, 1);
  auto w2 = allreduce(g[2], c.data(), 20, 1);
  for (auto& w : {w0, w1, w2}) {
    const Error e = error_of(w);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(contains(e.what(), "10 x float32"));
    CHECK(contains(e.what(), "20 x float32"));
  }
}

// Rank 1 runs a different op, and nothing rank 0 or 2 sends reaches it (held links): its
// signature headers would wait forever for its first data sends (Executor holds a header until
// the data behind it is ready). Engine::kHeaderHold later they go alone, and ranks 0 and 2
// name the mismatch long before the op's 60 s deadline.
TEST_CASE("fabric: a mismatch is found although the odd rank's data sends never get ready",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(3);
  fabric.hold(0, 1);
  fabric.hold(2, 1);
  Group g(3, fabric);
  std::vector<float> a(20, 1.0f), b(20, 1.0f), c(20, 1.0f);
  // Recursive doubling over 3 ranks: rank 1 folds rank 0's value in before it sends anything.
  auto w0 = allreduce(g[0], a.data(), 20, 1);
  auto w1 = allreduce(g[1], b.data(), 10, 1);
  auto w2 = allreduce(g[2], c.data(), 20, 1);
  for (auto& w : {w0, w2}) {
    const Error e = error_of(w);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(contains(e.what(), "10 x float32"));
    CHECK(contains(e.what(), "20 x float32"));
  }
  fabric.release(0, 1);
  fabric.release(2, 1);
  const Error e1 = error_of(w1);
  INFO(e1.what());
  CHECK(e1.code() == ErrorCode::invalid_argument);
}

TEST_CASE("fabric: a corrupted control header is a protocol error naming the sender",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(2);
  Group g(2, fabric, {0});
  std::vector<float> a(10, 1.0f);
  auto w = allreduce(g[0], a.data(), a.size(), 1);
  fabric.corrupt_next_header(1, 0);
  fabric.inject(1, 0, FrameType::status_request, cpu::encode_u64(1));
  const Error e = error_of(w);
  INFO(e.what());
  CHECK(e.code() == ErrorCode::network);
  CHECK(names(e, 1));
  CHECK(contains(e.what(), "protocol error"));
}

TEST_CASE("fabric: abort racing completion never hangs and leaves one outcome per op",
          "[tcp][fabric][failure]") {
  for (int round = 0; round < 50; ++round) {
    MemoryFabric fabric(2);
    Group g(2, fabric);
    std::vector<float> a(64, 1.0f), b(64, 1.0f);
    auto w0 = allreduce(g[0], a.data(), a.size(), 1);
    auto w1 = allreduce(g[1], b.data(), b.size(), 1);
    std::thread aborter([&] {
      g[0].abort(std::make_exception_ptr(Error(ErrorCode::aborted, "test abort", ErrorContext{})));
    });
    aborter.join();
    for (auto& w : {w0, w1}) {
      REQUIRE(w->wait_for(kBound));
      try {
        w->wait();
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::aborted);
        CHECK(contains(e.what(), "test abort"));
      }
    }
    // After the abort every new op fails fast with it.
    const Error later = error_of(allreduce(g[0], a.data(), a.size(), 2));
    CHECK(contains(later.what(), "test abort"));
  }
}

TEST_CASE("fabric: callers driving the loop complete every op, from several threads at once",
          "[tcp][fabric]") {
  MemoryFabric fabric(2);
  Group g(2, fabric);
  constexpr int kOps = 200;
  std::vector<float> a(kOps, 1.0f), b(kOps, 1.0f);
  // Rank 0: four threads, each waiting (driving) on every fourth op; rank 1: one thread.
  std::vector<std::shared_ptr<WorkState>> w0;
  for (int i = 0; i < kOps; ++i) {
    w0.push_back(allreduce(g[0], &a[static_cast<std::size_t>(i)], 1,
                           static_cast<std::uint64_t>(i + 1), 60s, true));
  }
  std::vector<std::thread> waiters;
  std::atomic<int> failed{0};
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&, t] {
      for (int i = t; i < kOps; i += 4) {
        try {
          w0[static_cast<std::size_t>(i)]->wait();
        } catch (...) {
          failed.fetch_add(1);
        }
      }
    });
  }
  for (int i = 0; i < kOps; ++i) {
    allreduce(g[1], &b[static_cast<std::size_t>(i)], 1, static_cast<std::uint64_t>(i + 1), 60s,
              true)
        ->wait();
  }
  for (auto& t : waiters) {
    t.join();
  }
  CHECK(failed.load() == 0);
  CHECK(std::all_of(a.begin(), a.end(), [](float v) { return v == 2.0f; }));
  CHECK(std::all_of(b.begin(), b.end(), [](float v) { return v == 2.0f; }));
}

TEST_CASE("fabric: a caller driving the loop gives way to abort() and to the group's end",
          "[tcp][fabric][failure]") {
  for (int round = 0; round < 20; ++round) {
    MemoryFabric fabric(2);
    Group g(2, fabric);
    float x = 1.0f;
    // Rank 1 never joins: the caller drives (sleeping in the transport's poll) until told.
    auto w = allreduce(g[0], &x, 1, 1, 60s, true);
    std::string outcome;
    std::thread waiter([&] {
      try {
        w->wait();
        outcome = "completed";
      } catch (const Error& e) {
        outcome = e.what();
      }
    });
    // Once the waiting thread runs the loop (bounded: it gets the loop within one engine turn).
    const Deadline driving_by = Deadline::after(kBound);
    while (!g[0].caller_driving() && !driving_by.expired()) {
      std::this_thread::yield();
    }
    REQUIRE(g[0].caller_driving());
    if (round % 2 == 0) {
      g[0].abort(std::make_exception_ptr(Error(ErrorCode::aborted, "test abort", ErrorContext{})));
    } else {
      g.ranks[0].reset();  // destroyed while the caller drives
    }
    REQUIRE(w->wait_for(kBound));
    waiter.join();
    INFO(outcome);
    CHECK(contains(outcome, round % 2 == 0 ? "test abort" : "destroyed"));
  }
}

TEST_CASE("fabric: the op with the earliest deadline times out first, and the others fail with it",
          "[tcp][fabric][failure]") {
  MemoryFabric fabric(2);
  Group g(2, fabric, {0});  // rank 1 never issues anything (and never answers)
  std::vector<float> a(10, 1.0f), b(10, 1.0f);
  auto first = allreduce(g[0], a.data(), 10, 1, 60s);
  auto second = allreduce(g[0], b.data(), 10, 2, 200ms);  // queued behind seq 1, expires first
  const Error e2 = error_of(second);
  INFO(e2.what());
  CHECK(e2.code() == ErrorCode::timeout);
  CHECK(e2.context().seq == 2);
  CHECK(contains(e2.what(), "queued behind"));
  const Error e1 = error_of(first);
  CHECK(std::string(e1.what()) == e2.what());
}

// Rank 3 died; rank 2 noticed and aborted (its notice names root 3); rank 1 got that notice
// and left (its goodbye carries the cause). Rank 0 hears the news in every possible order
// (each link keeps its own order, as TCP does) and must name rank 3 every time.
TEST_CASE("fabric: every arrival order of cascading news names the root-cause rank",
          "[tcp][fabric][failure]") {
  cpu::AbortNotice root;
  root.code = static_cast<int>(ErrorCode::network);
  root.seq = 1;
  root.root_rank = 3;
  root.peers = {3};
  root.message = "allreduce on rank 2/4 [fabric]: lost the connection to rank 3 (mem:3): reset";
  root.root_message = root.message;
  cpu::AbortNotice forwarded = root;  // rank 1's failure: it heard rank 2's notice
  forwarded.message =
      "allreduce on rank 1/4 [fabric]: rank 2 (mem:2) failed and aborted the group: " +
      root.message;
  cpu::Goodbye bye{1, forwarded};

  struct News {
    int from;
    int kind;  // 0 frame, 1 close
    FrameType type;
    std::vector<std::uint8_t> payload;
  };
  const std::vector<std::vector<News>> links = {
      {{1, 0, FrameType::goodbye, cpu::encode(bye)}, {1, 1, FrameType::abort, {}}},
      {{2, 0, FrameType::abort, cpu::encode(root)}, {2, 1, FrameType::abort, {}}},
      {{3, 1, FrameType::abort, {}}},
  };
  // Every interleaving of the three links' sequences: permutations of the multiset of link
  // indices {0,0,1,1,2}.
  std::vector<int> order = {0, 0, 1, 1, 2};
  int cases = 0;
  do {
    MemoryFabric fabric(4);
    Group g(4, fabric, {0});
    std::vector<float> a(100, 1.0f);
    auto w = allreduce(g[0], a.data(), a.size(), 1);
    std::vector<std::size_t> next(links.size(), 0);
    std::string seq;
    for (int l : order) {
      const News& n = links[static_cast<std::size_t>(l)][next[static_cast<std::size_t>(l)]++];
      seq += fmt::format("{}{} ", n.kind == 0 ? "frame" : "close", n.from);
      if (n.kind == 0) {
        fabric.inject(n.from, 0, n.type, n.payload);
      } else {
        fabric.inject_close(n.from, 0,
                            "the connection was closed without the peer leaving the group");
      }
    }
    const Error e = error_of(w);
    INFO("arrival order: " << seq << "\nerror: " << e.what());
    CHECK(names(e, 3));
    CHECK(e.code() == ErrorCode::network);
    ++cases;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(cases == 30);
}

TEST_CASE(
    "fabric: a rank killed mid-collective makes every survivor name it, however the news cascades",
    "[tcp][fabric][failure]") {
  for (int round = 0; round < 20; ++round) {
    MemoryFabric fabric(4);
    auto g = std::make_unique<Group>(4, fabric);
    std::vector<std::vector<float>> data(4, std::vector<float>(4096, 1.0f));
    std::vector<std::shared_ptr<WorkState>> w;
    for (int r = 0; r < 3; ++r) {
      w.push_back(allreduce((*g)[r], data[static_cast<std::size_t>(r)].data(), 4096, 1));
    }
    fabric.crash(3);
    // Rank 1 leaves as soon as it failed: its goodbye must carry the root cause.
    const Error e1 = error_of(w[1]);
    g->ranks[1].reset();
    for (int r : {0, 1, 2}) {
      const Error e = r == 1 ? e1 : error_of(w[static_cast<std::size_t>(r)]);
      INFO("round " << round << " rank " << r << ": " << e.what());
      CHECK(names(e, 3));
    }
  }
}

TEST_CASE("fabric: CHORUS_FAULT close_link fails the faulty rank at once and survivors name it",
          "[tcp][fabric][fault]") {
  MemoryFabric fabric(3);
  // Rank 1's stack built from a table as production builds it, with the fabric in the socket
  // transport's place: CHORUS_FAULT puts the fault layer on top. (Set before any engine thread
  // runs, unset before the others start: the environment is not for concurrent writers.)
  ::setenv("CHORUS_FAULT", "rank=1:close_link=2", 1);
  cpu::StackContext ctx;
  ctx.rank = 1;
  ctx.size = 3;
  cpu::TransportStack stack = cpu::build_stack({fabric.layer(), cpu::fault_layer()}, ctx);
  ::unsetenv("CHORUS_FAULT");
  Group g(3, fabric, {0, 2});
  g.start(1, std::move(stack.transport));
  std::vector<std::vector<float>> data(3, std::vector<float>(1000, 1.0f));
  std::vector<std::shared_ptr<WorkState>> w;
  for (int r = 0; r < 3; ++r) {
    w.push_back(allreduce(g[r], data[static_cast<std::size_t>(r)].data(), 1000, 1));
  }
  const Error e1 = error_of(w[1]);
  INFO(e1.what());
  CHECK(e1.code() == ErrorCode::aborted);
  CHECK(contains(e1.what(), "CHORUS_FAULT closed this rank's connections to rank 2"));
  for (int r : {0, 2}) {
    const Error e = error_of(w[static_cast<std::size_t>(r)]);
    INFO("rank " << r << ": " << e.what());
    CHECK(names(e, 1));
  }
}

TEST_CASE("CHORUS_FAULT values parse, and malformed ones name the variable and the accepted forms",
          "[tcp][fault]") {
  const auto faults = cpu::parse_faults(
      "rank=2:close_link=1,after_bytes=1M;rank=0:stall=500ms,at_seq=3;rank=3:exit_at_seq=5");
  REQUIRE(faults.size() == 3);
  CHECK(faults[0].kind == cpu::Fault::Kind::close_link);
  CHECK(faults[0].rank == 2);
  CHECK(faults[0].peer == 1);
  CHECK(faults[0].after_bytes == (1u << 20));
  CHECK(faults[1].kind == cpu::Fault::Kind::stall);
  CHECK(faults[1].stall == 500ms);
  CHECK(faults[1].at_seq == 3);
  CHECK(faults[2].kind == cpu::Fault::Kind::exit);
  CHECK(faults[2].at_seq == 5);
  for (const char* bad :
       {"", "rank=1", "close_link=1", "rank=x:stall=1s", "rank=1:stall=fast", "rank=1:close_link=1",
        "rank=1:close_link=2,after_bytes=3X", "rank=1:exit_at_seq=0", "rank=1:explode=1",
        "rank=1:stall=1s,after_bytes=5"}) {
    INFO(bad);
    try {
      cpu::parse_faults(bad);
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK(contains(e.what(), "CHORUS_FAULT"));
      CHECK(contains(e.what(), "rank=R:close_link=P"));
    }
  }
}

TEST_CASE("CHORUS_FAULT naming a rank outside the group is warned about, once, by rank 0",
          "[tcp][fault]") {
  const std::string spec = "rank=7:stall=1s;rank=1:close_link=5;rank=1:exit_at_seq=2";
  const std::string why = cpu::faults_outside_group(spec, cpu::parse_faults(spec), 2);
  INFO(why);
  CHECK(contains(why, "rank=7"));
  CHECK(contains(why, "rank=1:close_link=5"));
  CHECK(contains(why, "group of 2 ranks (ranks 0..1)"));
  CHECK(cpu::faults_outside_group("rank=1:stall=1s", cpu::parse_faults("rank=1:stall=1s"), 2)
            .empty());

  // Through the variable: rank 0 of a 2-rank group logs one WARN line naming rank 7 and the
  // size; rank 1 says nothing (it would be the same line again).
  std::vector<std::string> warnings;
  std::mutex mu;
  set_log_sink([&](LogLevel level, std::string_view line) {
    if (level == LogLevel::warn && line.find("CHORUS_FAULT") != std::string_view::npos) {
      const std::lock_guard lock(mu);
      warnings.emplace_back(line);
    }
  });
  ::setenv("CHORUS_FAULT", "rank=7:stall=1s", 1);
  CHECK(cpu::faults_for(0, 2).empty());
  CHECK(cpu::faults_for(1, 2).empty());
  ::unsetenv("CHORUS_FAULT");
  set_log_sink(nullptr);
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "rank=7"));
  CHECK(contains(warnings[0], "outside this group of 2 ranks"));
}

}  // namespace chorus::test

namespace chorus::test {

TEST_CASE("abort notices and goodbyes carry the root cause across the wire", "[tcp][wire]") {
  cpu::AbortNotice n;
  n.code = static_cast<int>(ErrorCode::timeout);
  n.seq = 7;
  n.root_rank = 3;
  n.peers = {3, 1};
  n.message = "rank 2's words";
  n.root_message = "rank 3 did not answer";
  const auto back = cpu::decode_abort(cpu::encode(n));
  REQUIRE(back);
  CHECK(back->code == n.code);
  CHECK(back->seq == 7);
  CHECK(back->root_rank == 3);
  CHECK(back->peers == n.peers);
  CHECK(back->message == n.message);
  CHECK(back->root_message == n.root_message);

  const auto plain = cpu::decode_goodbye(cpu::encode(cpu::Goodbye{5, std::nullopt}));
  REQUIRE(plain);
  CHECK(plain->last_seq == 5);
  CHECK(!plain->cause);
  const auto failed = cpu::decode_goodbye(cpu::encode(cpu::Goodbye{5, n}));
  REQUIRE(failed);
  REQUIRE(failed->cause);
  CHECK(failed->cause->root_rank == 3);
  CHECK(failed->cause->root_message == n.root_message);

  // Truncated payloads are rejected, never read past their end.
  auto bytes = cpu::encode(n);
  for (std::size_t len : {std::size_t{0}, std::size_t{19}, std::size_t{27}, std::size_t{30}}) {
    CHECK(!cpu::decode_abort(std::vector<std::uint8_t>(
        bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len))));
  }
  CHECK(!cpu::decode_goodbye({1, 2, 3}));
}

TEST_CASE("fabric liveness: a peer gone silent (no reset) is named within the peer timeout",
          "[tcp][fabric][liveness]") {
  // Links dropped silently: no reset, no EOF, as when a host loses power or a cable is cut.
  // The op's deadline is a minute; the peer timeout (300 ms) must be what fails it.
  MemoryFabric fabric(3);
  Group g(3, fabric, {}, 300ms);
  fabric.drop_link(2, 0);
  fabric.drop_link(2, 1);
  std::vector<std::vector<float>> data(2, std::vector<float>(1000, 1.0f));
  const auto t0 = Clock::now();
  auto w0 = allreduce(g[0], data[0].data(), 1000, 1, 60s);
  auto w1 = allreduce(g[1], data[1].data(), 1000, 1, 60s);
  for (const auto& w : {w0, w1}) {
    const Error e = error_of(w);
    INFO(e.what());
    CHECK(e.code() == ErrorCode::network);
    CHECK(names(e, 2));
    CHECK(contains(e.what(), "no traffic or heartbeat from rank 2 (mem:2)"));
    CHECK(contains(e.what(), "peer timeout 300 ms"));
  }
  CHECK(Clock::now() - t0 < 30s);  // far below the op's minute: the liveness check failed it
}

TEST_CASE("fabric liveness: heartbeats keep idle peers alive across many peer timeouts",
          "[tcp][fabric][liveness]") {
  MemoryFabric fabric(3);
  // 1 s: on a busy 2-core machine (sanitizer builds beside the tests) the three engine threads
  // of this process went unscheduled for 200 ms, and once for 540 ms, and missed their
  // heartbeats; the case is about several timeouts passing, not about a short one.
  Group g(3, fabric, {}, 1s);
  // Idle for three peer timeouts (the scenario itself, not a synchronization): only heartbeats
  // cross the fabric meanwhile.
  std::this_thread::sleep_for(3s);
  std::vector<std::vector<float>> data(3, std::vector<float>(100, 1.0f));
  std::vector<std::shared_ptr<WorkState>> w;
  for (int r = 0; r < 3; ++r) {
    w.push_back(allreduce(g[r], data[static_cast<std::size_t>(r)].data(), 100, 1));
  }
  for (int r = 0; r < 3; ++r) {
    REQUIRE(w[static_cast<std::size_t>(r)]->wait_for(kBound));
    w[static_cast<std::size_t>(r)]->wait();
    CHECK(data[static_cast<std::size_t>(r)][0] == 3.0f);
  }
  CHECK(fabric.sent(0, 1, FrameType::heartbeat).size() >= 5);
}

namespace {

// A SmallOps that does nothing: the table tests only ask who offers it.
class NoSmallOps final : public cpu::SmallOps {
 public:
  const char* name() const noexcept override { return "none"; }
  bool takes(const OpSignature&, std::size_t) const noexcept override { return false; }
  std::size_t max_bytes() const noexcept override { return 0; }
  void announce(const OpSignature&) noexcept override {}
  void publish(const OpSignature&, const void*, std::size_t) noexcept override {}
  void wake_peers() noexcept override {}
  bool ready(const OpSignature&, std::optional<Mismatch>&) const noexcept override { return false; }
  void finish(void*, std::size_t, DataType, ReduceOp) noexcept override {}
  std::vector<std::pair<int, std::uint64_t>> missing(std::uint64_t) const override { return {}; }
  std::uint64_t snapshot() const noexcept override { return 0; }
  bool wait(std::uint64_t, Deadline) noexcept override { return false; }
};

// A decorator offering a capability, as the shared-memory transport offers its board.
class Offering final : public cpu::ForwardingTransport {
 public:
  Offering(std::unique_ptr<cpu::EngineTransport> inner, cpu::SmallOps* small)
      : ForwardingTransport(std::move(inner)), small_(small) {}
  cpu::SmallOps* small_ops() noexcept override { return small_; }

 private:
  cpu::SmallOps* small_;
};

cpu::TransportLayer offering_layer(cpu::SmallOps* small) {
  cpu::TransportLayer l;
  l.name = "offering";
  l.applies = [](const cpu::StackContext&) { return true; };
  l.prepare = [small](cpu::StackContext&) -> cpu::LayerBuild {
    return [small](std::unique_ptr<cpu::EngineTransport> below, cpu::StackContext&) {
      return std::make_unique<Offering>(std::move(below), small);
    };
  };
  return l;
}

}  // namespace

TEST_CASE(
    "transport table: a capability passes through the layers above; CHORUS_FAULT hides "
    "the small-op path on every rank, named or not",
    "[tcp][fabric][fault]") {
  MemoryFabric fabric(2);
  NoSmallOps small;
  const std::vector<cpu::TransportLayer> table = {fabric.layer(), offering_layer(&small),
                                                  cpu::fault_layer()};
  for (int r = 0; r < 2; ++r) {
    cpu::StackContext ctx;
    ctx.rank = r;
    ctx.size = 2;
    // Unset: the fault layer does not apply, and the capability reaches the top.
    CHECK(cpu::build_stack(table, ctx).transport->small_ops() == &small);
    CHECK(cpu::build_stack({fabric.layer()}, ctx).transport->small_ops() == nullptr);
  }
  ::setenv("CHORUS_FAULT", "rank=1:stall=1ms", 1);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    cpu::StackContext ctx;
    ctx.rank = r;
    ctx.size = 2;
    CHECK(cpu::build_stack(table, ctx).transport->small_ops() == nullptr);
  }
  ::unsetenv("CHORUS_FAULT");
}

}  // namespace chorus::test
