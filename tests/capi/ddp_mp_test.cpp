// SPDX-License-Identifier: BSD-3-Clause
// The DDP toolkit on real ranks over loopback tcp: data-parallel training equals single-process
// full-batch training on 1, 2 and 4 ranks; Join on uneven shards in both divide modes; the
// early-termination mode raises on every rank; an unused gradient never hangs; large buckets go
// through SharedBuffers that the peers map.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <string>

#include <chorus/chorus.hpp>
#include <chorus/ddp.hpp>

#include "support/multiproc.hpp"
#include "support/shared_buffer_maps.hpp"
#include "toy_model.hpp"
#include "toy_reference.hpp"

using namespace chorus;
using namespace std::chrono_literals;
namespace ddp = chorus::ddp;

namespace {

constexpr Duration kGroupTimeout = 30s;
constexpr Duration kRunTimeout = 90s;

// Each run gets its own key prefix on the shared store server.
std::string next_run_id() {
  static int n = 0;
  return "ddp-run-" + std::to_string(++n);
}

std::shared_ptr<ProcessGroup> connect(std::uint16_t port, const std::string& run, int rank,
                                      int size) {
  auto store = std::make_shared<TcpStore>(
      TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = kGroupTimeout});
  return make_tcp_group(
      make_prefix_store(run, store), rank, size,
      {.group = {.name = run, .timeout = kGroupTimeout}, .interface = "127.0.0.1"});
}

// The toy model's state on one rank: params, grads and the reducer over the grads' slices.
struct Replica {
  std::shared_ptr<ProcessGroup> pg;
  std::vector<float> params, grads;
  std::unique_ptr<ddp::GradientReducer> reducer;

  Replica(std::shared_ptr<ProcessGroup> group, const toy::Config& cfg) : pg(std::move(group)) {
    params = toy::init_params(cfg.init_seed + static_cast<std::uint64_t>(pg->rank()));
    ddp::broadcast_tensors(*pg, {Tensor::of(params.data(), params.size())});
    grads.assign(toy::kNumParams, 0.0f);
    std::vector<Tensor> views;
    for (int i = 0; i < 4; ++i) {
      views.push_back(Tensor::of(grads.data() + toy::kSliceOffset[i], toy::kSliceCount[i]));
    }
    reducer =
        std::make_unique<ddp::GradientReducer>(pg, views, ddp::ReducerOptions{.bucket_bytes = 256});
  }
  void step(const toy::Dataset& d, const std::size_t* batch, std::size_t n, float lr) {
    toy::loss_and_grad(params, d, batch, n, grads, [&](std::size_t i) { reducer->mark_ready(i); });
    reducer->finish();
    toy::sgd_step(params, grads, lr);
  }
};

void train_even(int world) {
  test::StoreServerProcess server;
  const std::string run = next_run_id();
  auto results = test::run_processes(
      world,
      [&](int rank) {
        const toy::Config cfg;
        const toy::Dataset data = toy::make_dataset(cfg.dataset_size);
        Replica r(connect(server.port(), run, rank, world), cfg);
        CHILD_CHECK(r.reducer->num_buckets() > 1);  // the test exercises several buckets
        const std::size_t b = cfg.global_batch / static_cast<std::size_t>(world);
        ddp::DistributedSampler sampler(data.size(), *r.pg,
                                        {.shuffle = true, .seed = cfg.sampler_seed});
        for (int e = 0; e < cfg.epochs; ++e) {
          sampler.set_epoch(static_cast<std::uint64_t>(e));
          const auto idx = sampler.indices();
          for (std::size_t s = 0; s + b <= idx.size(); s += b) {
            r.step(data, &idx[s], b, cfg.lr);
          }
        }
        const auto expected = toy::reference_full_batch(cfg, data);
        const float diff = toy::max_abs_diff(r.params, expected);
        if (!(diff < 1e-5f)) {
          throw test::ChildCheckFailed{"weights differ from full-batch training by " +
                                       std::to_string(diff)};
        }
        // Every replica holds the same weights (the checkpoint round trip keeps them so).
        const std::string path =
            "/tmp/chorus_ddp_mp_" + run + "_" + std::to_string(server.port()) + ".ckpt";
        std::vector<float> before = r.params;
        ddp::checkpoint_and_reload(*r.pg, path, Tensor::of(r.params.data(), r.params.size()));
        CHILD_CHECK(r.params == before);
        r.pg->barrier()->wait();
        if (rank == 0) {
          std::remove(path.c_str());
        }
      },
      kRunTimeout);
  REQUIRE_ALL_OK(results);
}

void train_uneven(int world, bool divide_by_initial) {
  test::StoreServerProcess server;
  const std::string run = next_run_id();
  auto results = test::run_processes(
      world,
      [&](int rank) {
        const toy::Config cfg;
        const toy::Dataset data = toy::make_dataset(cfg.dataset_size);
        Replica r(connect(server.port(), run, rank, world), cfg);
        const std::size_t b = cfg.global_batch / static_cast<std::size_t>(world);
        ddp::DistributedSampler sampler(data.size(), *r.pg,
                                        {.shuffle = true, .seed = cfg.sampler_seed});
        sampler.set_epoch(cfg.uneven_epoch);
        const auto idx = sampler.indices();
        ddp::Join join(*r.reducer, {.divide_by_initial_world_size = divide_by_initial});
        const int mine = toy::uneven_steps(cfg, rank);
        for (int s = 0; s < mine; ++s) {
          const int active = join.begin_step();
          // Ranks with fewer steps have left: rank r runs max(1, 4 - r) steps.
          int expected_active = 0;
          for (int q = 0; q < world; ++q) {
            expected_active += toy::uneven_steps(cfg, q) > s ? 1 : 0;
          }
          CHILD_CHECK(active == expected_active);
          r.step(data, &idx[static_cast<std::size_t>(s) * b], b, cfg.lr);
        }
        join.join([&] { toy::sgd_step(r.params, r.grads, cfg.lr); });
        const int max_steps = toy::uneven_steps(cfg, 0);
        CHILD_CHECK(static_cast<int>(join.shadow_steps()) == max_steps - mine);
        const auto expected = toy::reference_uneven(
            cfg, data, world, toy::init_params(cfg.init_seed), divide_by_initial);
        const float diff = toy::max_abs_diff(r.params, expected);
        if (!(diff < 1e-5f)) {
          throw test::ChildCheckFailed{"weights differ from the uneven reference by " +
                                       std::to_string(diff)};
        }
        r.pg->barrier()->wait();  // the group is still in lockstep after Join
      },
      kRunTimeout);
  REQUIRE_ALL_OK(results);
}

}  // namespace

TEST_CASE("data-parallel training equals full-batch training on 1, 2 and 4 ranks", "[ddp][mp]") {
  for (int world : {1, 2, 4}) {
    INFO("world " << world);
    train_even(world);
  }
}

TEST_CASE("Join: uneven shards finish with the expected weights in both divide modes",
          "[ddp][mp][join]") {
  SECTION("divide_by_initial_world_size = true") { train_uneven(4, true); }
  SECTION("divide_by_initial_world_size = false") { train_uneven(4, false); }
}

TEST_CASE("Join: throw_on_early_termination raises on every rank", "[ddp][mp][join]") {
  test::StoreServerProcess server;
  const std::string run = next_run_id();
  constexpr int kWorld = 3;
  auto results = test::run_processes(
      kWorld,
      [&](int rank) {
        const toy::Config cfg;
        Replica r(connect(server.port(), run, rank, kWorld), cfg);
        ddp::Join join(*r.reducer, {.throw_on_early_termination = true});
        const int mine = rank == 1 ? 1 : 3;  // rank 1 runs out after one step
        bool thrown = false;
        std::string message;
        try {
          for (int s = 0; s < mine; ++s) {
            join.begin_step();
            r.reducer->finish();
          }
          join.join();
        } catch (const ddp::EarlyTermination& e) {
          thrown = true;
          message = e.what();
        }
        CHILD_CHECK(thrown);
        CHILD_CHECK(message.find("throw_on_early_termination") != std::string::npos);
        CHILD_CHECK(message.find(rank == 1 ? "this rank ran out of data"
                                           : "a rank ran out of data") != std::string::npos);
        r.pg->barrier()->wait();  // the collectives stayed matched: the group still works
      },
      kRunTimeout);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("reducer: a gradient one rank never produced averages with zeros, no hang", "[ddp][mp]") {
  test::StoreServerProcess server;
  const std::string run = next_run_id();
  auto results = test::run_processes(
      2,
      [&](int rank) {
        auto pg = connect(server.port(), run, rank, 2);
        std::vector<float> g0(8), g1(4);
        ddp::GradientReducer reducer(
            pg, {Tensor::of(g0.data(), g0.size()), Tensor::of(g1.data(), g1.size())},
            {.bucket_bytes = 16});
        for (int step = 0; step < 3; ++step) {
          g0.assign(8, 1.0f);
          g1.assign(4, rank == 0 ? 2.0f : 4.0f);
          reducer.mark_ready(1);
          if (rank == 0) {
            reducer.mark_ready(0);  // rank 1's parameter 0 is unused this step
          }
          reducer.finish();
          CHILD_CHECK(g0 == std::vector<float>(8, 0.5f));
          CHILD_CHECK(g1 == std::vector<float>(4, 3.0f));
        }
      },
      kRunTimeout);
  REQUIRE_ALL_OK(results);
}

TEST_CASE("reducer: large buckets are SharedBuffers that the peers map, averaged exactly",
          "[ddp][mp]") {
  for (int world : {2, 4}) {
    INFO(world << " ranks");
    test::StoreServerProcess server;
    const std::string run = next_run_id();
    auto results = test::run_processes(
        world,
        [&](int rank) {
          auto pg = connect(server.port(), run, rank, world);
          constexpr std::size_t kCount = 200'003;  // 3 gradients of 800 KB: one 2.4 MB bucket
          std::vector<std::vector<float>> grads(3, std::vector<float>(kCount));
          std::vector<Tensor> views;
          for (auto& g : grads) {
            views.push_back(Tensor::of(g.data(), g.size()));
          }
          {
            ddp::GradientReducer reducer(pg, views);
            CHILD_CHECK(reducer.num_buckets() == 1);
            const int own = test::mapped_shared_buffers();  // the bucket
            CHILD_CHECK(own >= 1);
            for (int step = 0; step < 3; ++step) {
              for (std::size_t g = 0; g < grads.size(); ++g) {
                for (std::size_t i = 0; i < kCount; ++i) {
                  grads[g][i] = static_cast<float>(rank + 1 + step + (i + g) % 5);
                }
                reducer.mark_ready(g);
              }
              reducer.finish();
              bool exact = true;
              for (std::size_t g = 0; g < grads.size(); ++g) {
                for (std::size_t i = 0; i < kCount; ++i) {
                  exact = exact && grads[g][i] == static_cast<float>(world + 1) / 2 + step +
                                                      static_cast<float>((i + g) % 5);
                }
              }
              CHILD_CHECK(exact);
            }
            // The peers' buckets too: the mapped single-copy path ran.
            CHILD_CHECK(test::mapped_shared_buffers() > own);
          }
          pg.reset();
          CHILD_CHECK(test::mapped_shared_buffers() == 0);
        },
        kRunTimeout);
    REQUIRE_ALL_OK(results);
  }
}
