// SPDX-License-Identifier: BSD-3-Clause
// Single-process references for the toy model: what the data-parallel runs must end with.
#pragma once

#include <vector>

#include <chorus/ddp.hpp>

#include "toy_model.hpp"

namespace toy {

// One process training on the full global batch of each step (the sampler with one replica
// yields the same epoch order as the union of the ranks' shards).
inline std::vector<float> reference_full_batch(const Config& c, const Dataset& d) {
  std::vector<float> p = init_params(c.init_seed);
  std::vector<float> g;
  chorus::ddp::DistributedSampler sampler(d.size(), 1, 0,
                                          {.shuffle = true, .seed = c.sampler_seed});
  for (int e = 0; e < c.epochs; ++e) {
    sampler.set_epoch(static_cast<std::uint64_t>(e));
    const auto idx = sampler.indices();
    for (std::size_t s = 0; s + c.global_batch <= idx.size(); s += c.global_batch) {
      loss_and_grad(p, d, &idx[s], c.global_batch, g);
      sgd_step(p, g, c.lr);
    }
  }
  return p;
}

// The uneven (Join) phase of `world` ranks simulated in one process, from params p: each step
// sums the mean gradients of the ranks still active and divides by the world size or by the
// number of active ranks.
inline std::vector<float> reference_uneven(const Config& c, const Dataset& d, int world,
                                           std::vector<float> p,
                                           bool divide_by_initial_world_size) {
  const std::size_t b = c.global_batch / static_cast<std::size_t>(world);
  std::vector<std::vector<std::size_t>> shards;
  for (int r = 0; r < world; ++r) {
    chorus::ddp::DistributedSampler sampler(d.size(), world, r,
                                            {.shuffle = true, .seed = c.sampler_seed});
    sampler.set_epoch(c.uneven_epoch);
    shards.push_back(sampler.indices());
  }
  std::vector<float> g, sum(kNumParams);
  for (int s = 0;; ++s) {
    int active = 0;
    sum.assign(kNumParams, 0.0f);
    for (int r = 0; r < world; ++r) {
      if (s < uneven_steps(c, r)) {
        ++active;
        loss_and_grad(p, d, &shards[static_cast<std::size_t>(r)][static_cast<std::size_t>(s) * b],
                      b, g);
        for (std::size_t i = 0; i < kNumParams; ++i) {
          sum[i] += g[i];
        }
      }
    }
    if (active == 0) {
      return p;
    }
    const float divisor = static_cast<float>(divide_by_initial_world_size ? world : active);
    for (auto& v : sum) {
      v /= divisor;
    }
    sgd_step(p, sum, c.lr);
  }
}

}  // namespace toy
