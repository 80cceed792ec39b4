// SPDX-License-Identifier: BSD-3-Clause
// Ops issued on one group from several threads at once, over real processes; failed ops waited
// from several threads.
//
// Issue order is execution order: a call takes its sequence number and queues its op as one
// step, so however the threads race, the engine runs ops in seq order and the signature check
// (which carries the seq) sees the same op at the same seq on every rank. To give every rank
// the same order without serializing the threads, each round has all threads issue the SAME
// collective (same op, count, dtype, root) with inputs that depend only on (rank, round): any
// pairing of threads across ranks then gives the same, checkable result. Tagged send/recv are
// matched by (peer, tag), so each thread also exchanges its own tagged messages every round.
#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

constexpr int kThreads = 4;

// What every thread issues in round r: one collective of kind r % 5 (identical on every thread
// and rank), plus one tagged send to the next rank and one recv from the previous rank.
// Returns an empty string or what went wrong.
std::string run_round(ProcessGroup& pg, int thread, int round) {
  const int rank = pg.rank();
  const int n = pg.size();
  const std::size_t count = 1 + static_cast<std::size_t>(round % 7) * 3;
  const auto value = [&](int r) { return static_cast<std::int64_t>(r * 1000 + round); };

  // p2p first, so it is in flight while the collective runs; matched by tag, never by order.
  const std::uint32_t tag = static_cast<std::uint32_t>(thread * 100000 + round);
  std::int64_t out_msg = value(rank) * 10 + thread;
  std::int64_t in_msg = -1;
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  auto sent = pg.send(Tensor::of(&out_msg, 1), next, tag);
  auto got = pg.recv(Tensor::of(&in_msg, 1), prev, tag);

  std::vector<std::int64_t> buf(count * static_cast<std::size_t>(n), -7);
  std::string error;
  switch (round % 5) {
    case 0: {  // allreduce sum
      std::vector<std::int64_t> x(count, value(rank));
      pg.allreduce(Tensor::of(x.data(), x.size()))->wait();
      std::int64_t want = 0;
      for (int r = 0; r < n; ++r) {
        want += value(r);
      }
      for (auto v : x) {
        if (v != want)
          error = "allreduce: got " + std::to_string(v) + " want " + std::to_string(want);
      }
      break;
    }
    case 1: {  // broadcast from a root that moves with the round
      const int root = round % n;
      std::vector<std::int64_t> x(count, rank == root ? value(root) : -1);
      pg.broadcast(Tensor::of(x.data(), x.size()), {.root = root})->wait();
      for (auto v : x) {
        if (v != value(root)) error = "broadcast: got " + std::to_string(v);
      }
      break;
    }
    case 2: {  // allgather
      std::vector<std::int64_t> x(count, value(rank));
      pg.allgather(Tensor::of(x.data(), x.size()), Tensor::of(buf.data(), buf.size()))->wait();
      for (std::size_t i = 0; i < buf.size(); ++i) {
        if (buf[i] != value(static_cast<int>(i / count)))
          error = "allgather: wrong block at " + std::to_string(i);
      }
      break;
    }
    case 3:
      pg.barrier()->wait();
      break;
    default: {  // reduce_scatter max
      for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = value(rank) + static_cast<std::int64_t>(i);
      }
      std::vector<std::int64_t> x(count);
      pg.reduce_scatter(Tensor::of(buf.data(), buf.size()), Tensor::of(x.data(), x.size()),
                        {.op = ReduceOp::max})
          ->wait();
      for (std::size_t i = 0; i < count; ++i) {
        const auto want =
            value(n - 1) + static_cast<std::int64_t>(static_cast<std::size_t>(rank) * count + i);
        if (x[i] != want)
          error = "reduce_scatter: got " + std::to_string(x[i]) + " want " + std::to_string(want);
      }
      break;
    }
  }
  sent->wait();
  got->wait();
  if (in_msg != value(prev) * 10 + thread) {
    error = "recv tag " + std::to_string(tag) + ": got " + std::to_string(in_msg);
  }
  return error;
}

}  // namespace

TEST_CASE("4 threads issue collectives and p2p on one group: no false mismatch",
          "[tcp][mp][threads]") {
  const int world = GENERATE(2, 4);
  const int rounds = 500;  // x 4 threads = 2,000 collectives and 2,000 send/recv pairs per rank
  StoreServerProcess server;
  const auto results = run_processes(
      world,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, world, loopback_options());
        // Threads issue round r together; the barrier only keeps rounds apart (round r+1 has
        // another op kind, so mixing rounds would be a real mismatch), not the threads.
        std::barrier round_done(kThreads);
        std::vector<std::string> errors(kThreads);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
          threads.emplace_back([&, t] {
            for (int r = 0; r < rounds; ++r) {
              try {
                if (errors[static_cast<std::size_t>(t)].empty()) {
                  errors[static_cast<std::size_t>(t)] = run_round(*pg, t, r);
                }
              } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(t)] = e.what();
              }
              round_done.arrive_and_wait();
            }
          });
        }
        for (auto& th : threads) {
          th.join();
        }
        for (const auto& e : errors) {
          if (!e.empty()) {
            throw ChildCheckFailed{e};
          }
        }
        // Every collective took exactly one seq: 4 threads x rounds, then this barrier.
        auto last = pg->barrier();
        last->wait();
        CHILD_CHECK(last->seq() == static_cast<std::uint64_t>(kThreads * rounds + 1));
      },
      240s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("threads that interleave different collectives differently per rank are a real mismatch",
          "[tcp][mp][threads]") {
  // Two threads issue allreduce of 8 and of 16 elements. A hand-off makes rank 0 issue the
  // 8-element one first and rank 1 the 16-element one first: seq 1 differs, and both ranks
  // must say so (one detects it, the other hears the abort notice).
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 2, loopback_options());
        std::vector<float> small(8, 1.0f);
        std::vector<float> large(16, 1.0f);
        std::shared_ptr<Work> first;
        std::shared_ptr<Work> second;
        std::mutex mu;
        std::condition_variable cv;
        bool first_issued = false;
        auto issue_first = [&](std::vector<float>& v) {
          first = pg->allreduce(Tensor::of(v.data(), v.size()));
          std::lock_guard lock(mu);
          first_issued = true;
          cv.notify_all();
        };
        // The mismatch may already have failed the group when the second call is made: then
        // the call itself rethrows the group's error, which is as good as its Work failing.
        std::exception_ptr second_error;
        auto issue_second = [&](std::vector<float>& v) {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return first_issued; });
          try {
            second = pg->allreduce(Tensor::of(v.data(), v.size()));
          } catch (...) {
            second_error = std::current_exception();
          }
        };
        std::thread a([&] { rank == 0 ? issue_first(small) : issue_second(small); });
        std::thread b([&] { rank == 0 ? issue_second(large) : issue_first(large); });
        a.join();
        b.join();
        const Error e = expect_error([&] {
          first->wait();
          if (second_error) {
            std::rethrow_exception(second_error);
          }
          second->wait();
        });
        CHILD_CHECK(e.code() == ErrorCode::invalid_argument);
        CHILD_CHECK(contains(e.what(), "8 x float32"));
        CHILD_CHECK(contains(e.what(), "16 x float32"));
        CHILD_CHECK(contains(e.what(), "seq 1"));
      },
      60s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test

namespace chorus::test {

// A failed op's error crosses threads: the engine thread fails each recv (its message is shorter
// than the recv's buffer) and drops the op, while the threads that waited read the error they
// caught, after letting go of the Work (a temporary). Each waiter owns its copy of the error
// (core/error_copy.hpp); ThreadSanitizer (the tsan leg runs this file) would report a waiter
// reading an exception object that the engine thread frees.
TEST_CASE("failing recvs waited from several threads while the engine drops them",
          "[tcp][mp][threads]") {
  constexpr int kRounds = 100;
  StoreServerProcess server;
  const auto results = run_processes(
      2,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 2, loopback_options());
        const auto tag = [](int thread, int round) {
          return static_cast<std::uint32_t>(thread * kRounds + round);
        };
        if (rank == 0) {
          double one = 1.0;
          std::vector<std::shared_ptr<Work>> sends;
          for (int r = 0; r < kRounds; ++r) {
            for (int t = 0; t < kThreads; ++t) {
              sends.push_back(pg->send(Tensor::of(&one, 1), 1, tag(t, r)));
            }
          }
          for (auto& w : sends) {
            w->wait();
          }
        } else {
          std::vector<std::string> errors(kThreads);
          std::vector<std::thread> threads;
          for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
              std::string& error = errors[static_cast<std::size_t>(t)];
              for (int r = 0; r < kRounds && error.empty(); ++r) {
                double two[2] = {0, 0};
                try {
                  pg->recv(Tensor::of(two, 2), 0, tag(t, r))->wait();
                  error = "a recv of 16 bytes took an 8-byte message";
                } catch (const Error& e) {
                  const Error copy = e;
                  if (copy.code() != ErrorCode::invalid_argument ||
                      !contains(copy.what(), "expects 16 bytes")) {
                    error = std::string(to_string(copy.code())) + ": " + copy.what();
                  }
                }
              }
            });
          }
          for (auto& th : threads) {
            th.join();
          }
          for (const auto& e : errors) {
            if (!e.empty()) {
              throw ChildCheckFailed{e};
            }
          }
        }
        // The failed recvs cost the group nothing.
        int x = 1;
        pg->allreduce(Tensor::of(&x, 1))->wait();
        CHILD_CHECK(x == 2);
      },
      120s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
