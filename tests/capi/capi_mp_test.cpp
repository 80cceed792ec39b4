// SPDX-License-Identifier: BSD-3-Clause
// The C ABI on real ranks: collectives through the C functions, wait_for/test on a running
// op, a collective timeout reported as CHORUS_ERR_TIMEOUT with its message, and
// chorus_group_shrink after a killed rank, and chorus_group_grow letting a joiner in.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <chorus/chorus.h>
#include <chorus/shared_buffer.hpp>

#include "support/multiproc.hpp"

using namespace std::chrono_literals;

namespace {

#define C_CHECK(call)                                                         \
  do {                                                                        \
    const chorus_result_t rc_ = (call);                                       \
    if (rc_ != CHORUS_OK) {                                                   \
      throw chorus::test::ChildCheckFailed{std::string(#call) + " -> " +      \
                                           chorus_result_string(rc_) + ": " + \
                                           chorus_get_last_error()};          \
    }                                                                         \
  } while (0)

struct CWorld {
  chorus_store_t* store = nullptr;
  chorus_group_t* group = nullptr;
  CWorld(std::uint16_t port, const char* prefix, int rank, int size) {
    chorus_tcp_store_config_t sc = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
    sc.port = port;
    sc.timeout_ms = 30000;
    chorus_store_t* base = nullptr;
    C_CHECK(chorus_tcp_store_create(&sc, &base));
    C_CHECK(chorus_prefix_store_create(prefix, base, &store));
    chorus_store_free(base);
    chorus_tcp_group_config_t gc = CHORUS_TCP_GROUP_CONFIG_INITIALIZER;
    gc.interface = "127.0.0.1";
    gc.timeout_ms = 30000;
    C_CHECK(chorus_group_create_tcp(store, rank, size, &gc, &group));
  }
  ~CWorld() {
    chorus_group_destroy(group);
    chorus_store_free(store);
  }
};

}  // namespace

TEST_CASE("C ABI on 2 ranks: allreduce, broadcast, allgather, send/recv, barrier", "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  auto results = chorus::test::run_processes(
      2,
      [&](int rank) {
        CWorld w(server.port(), "ops", rank, 2);
        chorus_work_t* work = nullptr;
        std::vector<double> x(5, rank + 1.0);
        chorus_tensor_t tx = chorus_cpu_tensor(x.data(), x.size(), CHORUS_FLOAT64);
        C_CHECK(chorus_allreduce(w.group, &tx, &tx, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        CHILD_CHECK(x == std::vector<double>(5, 3.0));

        std::vector<std::int32_t> b(3, rank == 1 ? 42 : 0);
        chorus_tensor_t tb = chorus_cpu_tensor(b.data(), b.size(), CHORUS_INT32);
        chorus_op_options_t opts = CHORUS_OP_OPTIONS_INITIALIZER;
        opts.root = 1;
        C_CHECK(chorus_broadcast(w.group, &tb, &opts, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        CHILD_CHECK(b == std::vector<std::int32_t>(3, 42));

        std::int64_t mine = 10 + rank;
        std::vector<std::int64_t> all(2);
        chorus_tensor_t tm = chorus_cpu_tensor(&mine, 1, CHORUS_INT64);
        chorus_tensor_t ta = chorus_cpu_tensor(all.data(), all.size(), CHORUS_INT64);
        C_CHECK(chorus_allgather(w.group, &tm, &ta, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        CHILD_CHECK((all == std::vector<std::int64_t>{10, 11}));

        float v = rank == 0 ? 7.5f : 0.0f;
        chorus_tensor_t tv = chorus_cpu_tensor(&v, 1, CHORUS_FLOAT32);
        if (rank == 0) {
          C_CHECK(chorus_send(w.group, &tv, 1, 9, nullptr, &work));
        } else {
          C_CHECK(chorus_recv(w.group, &tv, CHORUS_ANY_SOURCE, 9, nullptr, &work));
        }
        C_CHECK(chorus_work_wait(work));
        CHILD_CHECK(chorus_work_source_rank(work) == (rank == 0 ? -1 : 0));
        chorus_work_free(work);
        CHILD_CHECK(v == 7.5f);

        C_CHECK(chorus_barrier(w.group, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("C ABI on 2 ranks: allgatherv, reduce_scatterv, all_to_allv through chorus_run",
          "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  auto results = chorus::test::run_processes(
      2,
      [&](int rank) {
        CWorld w(server.port(), "vops", rank, 2);
        chorus_work_t* work = nullptr;
        const auto run_and_wait = [&](const chorus_op_t& op) {
          C_CHECK(chorus_run(w.group, &op, &work));
          C_CHECK(chorus_work_wait(work));
          chorus_work_free(work);
        };
        // allgatherv: rank 0 gives 1 element, rank 1 gives 3.
        const size_t counts[2] = {1, 3};
        std::vector<std::int32_t> mine(counts[rank], 10 * (rank + 1));
        std::vector<std::int32_t> all(4, -1);
        chorus_op_t gather = CHORUS_OP_INITIALIZER;
        gather.type = CHORUS_OP_ALLGATHERV;
        gather.in = chorus_cpu_tensor(mine.data(), mine.size(), CHORUS_INT32);
        gather.out = chorus_cpu_tensor(all.data(), all.size(), CHORUS_INT32);
        gather.out_counts = counts;
        run_and_wait(gather);
        CHILD_CHECK((all == std::vector<std::int32_t>{10, 20, 20, 20}));

        // reduce_scatterv with max: blocks of 1 and 3 elements.
        std::vector<std::int32_t> in = {rank, 5 * rank, 1, 2};
        std::vector<std::int32_t> out(counts[rank], -1);
        chorus_op_t scatter = CHORUS_OP_INITIALIZER;
        scatter.type = CHORUS_OP_REDUCE_SCATTERV;
        scatter.in = chorus_cpu_tensor(in.data(), in.size(), CHORUS_INT32);
        scatter.out = chorus_cpu_tensor(out.data(), out.size(), CHORUS_INT32);
        scatter.in_counts = counts;
        scatter.op = CHORUS_MAX;
        run_and_wait(scatter);
        CHILD_CHECK(
            out == (rank == 0 ? std::vector<std::int32_t>{1} : std::vector<std::int32_t>{5, 1, 2}));

        // all_to_allv: rank 0 sends 2 elements to rank 1 and none to itself; rank 1 sends 1
        // to rank 0 and keeps 1.
        const size_t in_counts[2][2] = {{0, 2}, {1, 1}};
        const size_t out_counts[2][2] = {{0, 1}, {2, 1}};
        std::vector<double> send =
            rank == 0 ? std::vector<double>{1.5, 2.5} : std::vector<double>{3.5, 4.5};
        std::vector<double> got(rank == 0 ? 1 : 3, 0.0);
        chorus_op_t exchange = CHORUS_OP_INITIALIZER;
        exchange.type = CHORUS_OP_ALL_TO_ALLV;
        exchange.in = chorus_cpu_tensor(send.data(), send.size(), CHORUS_FLOAT64);
        exchange.out = chorus_cpu_tensor(got.data(), got.size(), CHORUS_FLOAT64);
        exchange.in_counts = in_counts[rank];
        exchange.out_counts = out_counts[rank];
        run_and_wait(exchange);
        CHILD_CHECK(got ==
                    (rank == 0 ? std::vector<double>{3.5} : std::vector<double>{1.5, 2.5, 4.5}));

        // Counts that do not match the tensors, or none, fail on the calling rank, naming the
        // op and the field.
        chorus_op_t bad = gather;
        bad.in = gather.out;
        CHILD_CHECK(chorus_run(w.group, &bad, &work) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(std::string(chorus_get_last_error()).find("allgatherv") != std::string::npos);
        bad = gather;
        bad.out_counts = nullptr;
        CHILD_CHECK(chorus_run(w.group, &bad, &work) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(std::string(chorus_get_last_error()).find("out_counts") != std::string::npos);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("C ABI on 2 ranks: a coalesced allreduce through chorus_run", "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  auto results = chorus::test::run_processes(
      2,
      [&](int rank) {
        CWorld w(server.port(), "coalesced", rank, 2);
        chorus_work_t* work = nullptr;
        // Three tensors of 2, 0 and 5 elements; the first in place, the others out of place.
        std::vector<float> a = {1.0f + rank, 2.0f};
        std::vector<float> b;
        std::vector<float> c(5, 0.5f * (rank + 1));
        std::vector<float> c_out(5, -1.0f);
        const chorus_tensor_t ins[3] = {chorus_cpu_tensor(a.data(), a.size(), CHORUS_FLOAT32),
                                        chorus_cpu_tensor(nullptr, 0, CHORUS_FLOAT32),
                                        chorus_cpu_tensor(c.data(), c.size(), CHORUS_FLOAT32)};
        const chorus_tensor_t outs[3] = {ins[0], ins[1],
                                         chorus_cpu_tensor(c_out.data(), 5, CHORUS_FLOAT32)};
        chorus_op_t op = CHORUS_OP_INITIALIZER;
        op.type = CHORUS_OP_ALLREDUCE;
        op.op = CHORUS_SUM;
        op.ins = ins;
        op.outs = outs;
        op.num_tensors = 3;
        C_CHECK(chorus_run(w.group, &op, &work));
        C_CHECK(chorus_work_wait(work));
        const uint64_t seq = chorus_work_seq(work);
        chorus_work_free(work);
        CHILD_CHECK((a == std::vector<float>{3.0f, 4.0f}));
        CHILD_CHECK((c_out == std::vector<float>(5, 1.5f)));
        CHILD_CHECK((c == std::vector<float>(5, 0.5f * (rank + 1))));

        // One op: the next takes the next sequence number.
        C_CHECK(chorus_barrier(w.group, nullptr, &work));
        CHILD_CHECK(chorus_work_seq(work) == seq + 1);
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);

        // Wrong lists fail on the calling rank, naming what to fix.
        op.num_tensors = 0;
        CHILD_CHECK(chorus_run(w.group, &op, &work) == CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(std::string(chorus_get_last_error()).find("num_tensors") != std::string::npos);
        op.num_tensors = 3;
        op.type = CHORUS_OP_BROADCAST;
        CHILD_CHECK(chorus_run(w.group, &op, &work) == CHORUS_ERR_INVALID_ARGUMENT);
        op.type = CHORUS_OP_ALLREDUCE;
        op.in = ins[0];  // in/out beside ins/outs
        CHILD_CHECK(chorus_run(w.group, &op, &work) == CHORUS_ERR_INVALID_ARGUMENT);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("C ABI on 2 ranks: an allreduce over shared buffers", "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  auto results = chorus::test::run_processes(
      2,
      [&](int rank) {
        CWorld w(server.port(), "shared", rank, 2);
        const std::size_t count = 1 << 18;  // 1 MiB of float32: the mapped single-copy path
        void* in = nullptr;
        void* out = nullptr;
        C_CHECK(chorus_shared_buffer_alloc(count * sizeof(float), &in));
        C_CHECK(chorus_shared_buffer_alloc(count * sizeof(float), &out));
        CHILD_CHECK(chorus::in_shared_buffer(in, count * sizeof(float)));
        auto* x = static_cast<float*>(in);
        for (std::size_t i = 0; i < count; ++i) {
          x[i] = static_cast<float>(rank + 1 + i % 7);
        }
        chorus_tensor_t ti = chorus_cpu_tensor(in, count, CHORUS_FLOAT32);
        chorus_tensor_t to = chorus_cpu_tensor(out, count, CHORUS_FLOAT32);
        chorus_work_t* work = nullptr;
        C_CHECK(chorus_allreduce(w.group, &ti, &to, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        const auto* y = static_cast<const float*>(out);
        bool right = true;
        for (std::size_t i = 0; i < count; ++i) {
          right = right && y[i] == static_cast<float>(3 + 2 * (i % 7));
        }
        CHILD_CHECK(right);
        C_CHECK(chorus_shared_buffer_free(in));
        C_CHECK(chorus_shared_buffer_free(out));
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("C ABI on 2 ranks: wait_for on a running op, then a timeout as a status code",
          "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  auto results = chorus::test::run_processes(
      2,
      [&](int rank) {
        CWorld w(server.port(), "timeout", rank, 2);
        chorus_work_t* work = nullptr;
        float x = 1.0f;
        chorus_tensor_t t = chorus_cpu_tensor(&x, 1, CHORUS_FLOAT32);
        if (rank == 0) {
          // Rank 1 joins only after "go": the op is still running at wait_for's bound.
          C_CHECK(chorus_allreduce(w.group, &t, &t, nullptr, &work));
          int done = -1;
          C_CHECK(chorus_work_wait_for(work, 50, &done));
          CHILD_CHECK(done == 0);
          C_CHECK(chorus_work_test(work, &done));
          CHILD_CHECK(done == 0);
          C_CHECK(chorus_store_set(w.store, "go", "1", 1));
          C_CHECK(chorus_work_wait(work));
          chorus_work_free(work);
          CHILD_CHECK(x == 2.0f);

          // Rank 1 never joins this one: TIMEOUT within the op's 500 ms deadline (+ slack).
          chorus_op_options_t opts = CHORUS_OP_OPTIONS_INITIALIZER;
          opts.timeout_ms = 500;
          const auto start = std::chrono::steady_clock::now();
          C_CHECK(chorus_allreduce(w.group, &t, &t, &opts, &work));
          const chorus_result_t rc = chorus_work_wait(work);
          const auto elapsed = std::chrono::steady_clock::now() - start;
          const std::string message = chorus_get_last_error();
          chorus_work_free(work);
          if (rc != CHORUS_ERR_TIMEOUT) {
            throw chorus::test::ChildCheckFailed{std::string("expected TIMEOUT, got ") +
                                                 chorus_result_string(rc) + ": " + message};
          }
          CHILD_CHECK(elapsed < 10s);
          CHILD_CHECK(message.find("allreduce") != std::string::npos);
          CHILD_CHECK(message.find("rank 1") != std::string::npos);
          // The group is aborted: later ops fail at once with the original error.
          CHILD_CHECK(chorus_barrier(w.group, nullptr, &work) == CHORUS_ERR_TIMEOUT);
          C_CHECK(chorus_store_set(w.store, "rank0-done", "1", 1));
        } else {
          const char* go[] = {"go"};
          C_CHECK(chorus_store_wait(w.store, go, 1, 30000));
          C_CHECK(chorus_allreduce(w.group, &t, &t, nullptr, &work));
          C_CHECK(chorus_work_wait(work));
          chorus_work_free(work);
          const char* done[] = {"rank0-done"};
          C_CHECK(chorus_store_wait(w.store, done, 1, 30000));
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("C ABI on 3 ranks: chorus_group_shrink after a killed rank, then grow with a joiner",
          "[capi][mp]") {
  chorus::test::StoreServerProcess server;
  constexpr int kJoiner = 3;  // a fourth process, joining the survivors
  auto results = chorus::test::run_processes(
      4,
      [&](int rank) {
        if (rank == kJoiner) {
          chorus_tcp_store_config_t sc = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
          sc.port = server.port();
          sc.timeout_ms = 30000;
          chorus_store_t* base = nullptr;
          chorus_store_t* store = nullptr;
          C_CHECK(chorus_tcp_store_create(&sc, &base));
          C_CHECK(chorus_prefix_store_create("shrink", base, &store));
          chorus_store_free(base);
          const char* shrunk[] = {"shrunk"};
          C_CHECK(chorus_store_wait(store, shrunk, 1, 30000));
          chorus_tcp_group_config_t gc = CHORUS_TCP_GROUP_CONFIG_INITIALIZER;
          gc.interface = "127.0.0.1";
          chorus_group_t* group = nullptr;
          CHILD_CHECK(chorus_group_join_tcp(store, &gc, -1, 0, &group) ==
                      CHORUS_ERR_INVALID_ARGUMENT);
          C_CHECK(chorus_group_join_tcp(store, &gc, 30000, 0, &group));
          int size = 0;
          int new_rank = -1;
          C_CHECK(chorus_group_size(group, &size));
          C_CHECK(chorus_group_rank(group, &new_rank));
          CHILD_CHECK(size == 3 && new_rank == 2);
          float x = 3.0f;
          chorus_tensor_t t = chorus_cpu_tensor(&x, 1, CHORUS_FLOAT32);
          chorus_work_t* work = nullptr;
          C_CHECK(chorus_allreduce(group, &t, &t, nullptr, &work));
          C_CHECK(chorus_work_wait(work));
          chorus_work_free(work);
          CHILD_CHECK(x == 6.0f);
          chorus_group_destroy(group);
          chorus_store_free(store);
          return;
        }
        CWorld w(server.port(), "shrink", rank, 3);
        chorus_work_t* work = nullptr;
        float x = 1.0f;
        chorus_tensor_t t = chorus_cpu_tensor(&x, 1, CHORUS_FLOAT32);
        C_CHECK(chorus_allreduce(w.group, &t, &t, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        // Rank 2 dies only once every rank has its result (a peer whose link closes fails its
        // op at once, even when the data had arrived).
        const std::string mine = "first" + std::to_string(rank);
        const std::uint8_t one = 1;
        C_CHECK(chorus_store_set(w.store, mine.c_str(), &one, 1));
        const char* firsts[] = {"first0", "first1", "first2"};
        C_CHECK(chorus_store_wait(w.store, firsts, 3, 30000));
        if (rank == 2) {
          ::kill(::getpid(), SIGKILL);
        }
        // A survivor that already saw rank 2's sockets close fails the call itself; otherwise
        // the op fails.
        const chorus_result_t issued = chorus_allreduce(w.group, &t, &t, nullptr, &work);
        CHILD_CHECK(issued == CHORUS_ERR_NETWORK ||
                    (issued == CHORUS_OK && chorus_work_wait(work) == CHORUS_ERR_NETWORK));
        if (work != nullptr) {
          chorus_work_free(work);
        }

        chorus_group_t* survivors = nullptr;
        CHILD_CHECK(chorus_group_shrink(w.group, nullptr, -1, 0, &survivors) ==
                    CHORUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(survivors == nullptr);
        C_CHECK(chorus_group_shrink(w.group, nullptr, 0, 0, &survivors));
        int size = 0;
        int new_rank = -1;
        C_CHECK(chorus_group_size(survivors, &size));
        C_CHECK(chorus_group_rank(survivors, &new_rank));
        CHILD_CHECK(size == 2 && new_rank == rank);
        x = static_cast<float>(rank + 1);
        C_CHECK(chorus_allreduce(survivors, &t, &t, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        CHILD_CHECK(x == 3.0f);

        // Nobody waits yet: no larger group. Then the joiner comes and is let in.
        chorus_group_t* grown = nullptr;
        C_CHECK(chorus_group_grow(survivors, nullptr, 0, 0, &grown));
        CHILD_CHECK(grown == nullptr);
        if (rank == 0) {
          const char* key = "shrunk";
          const std::uint8_t one = 1;
          C_CHECK(chorus_store_set(w.store, key, &one, 1));
        }
        C_CHECK(chorus_group_grow(survivors, nullptr, 30000, 0, &grown));
        CHILD_CHECK(grown != nullptr);
        C_CHECK(chorus_group_size(grown, &size));
        C_CHECK(chorus_group_rank(grown, &new_rank));
        CHILD_CHECK(size == 3 && new_rank == rank);
        x = static_cast<float>(rank + 1);
        C_CHECK(chorus_allreduce(grown, &t, &t, nullptr, &work));
        C_CHECK(chorus_work_wait(work));
        chorus_work_free(work);
        CHILD_CHECK(x == 6.0f);
        C_CHECK(chorus_group_stop_admitting(grown, "done"));
        chorus_group_destroy(grown);
        chorus_group_destroy(survivors);
      },
      60s);
  INFO(chorus::test::describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(results[2].signal == SIGKILL);
  CHECK(results[3].ok());
}
