// SPDX-License-Identifier: BSD-3-Clause
// The toy model of ddp_train in plain C++: Linear(10->10), ReLU, Linear(10->5), MSE loss, SGD,
// over a synthetic regression dataset. Also the single-process references the tests (and
// ddp_train --verify) compare the distributed runs against. Header-only, std only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace toy {

inline constexpr int kIn = 10, kHidden = 10, kOut = 5;
// One flat parameter vector; each layer's weights and biases are a slice of it.
inline constexpr std::size_t kW1 = 0, kB1 = kW1 + kHidden * kIn, kW2 = kB1 + kHidden,
                             kB2 = kW2 + kOut * kHidden, kNumParams = kB2 + kOut;
// The slices as (offset, count), in registration order: W1, b1, W2, b2.
inline constexpr std::size_t kSliceOffset[4] = {kW1, kB1, kW2, kB2};
inline constexpr std::size_t kSliceCount[4] = {kB1 - kW1, kW2 - kB1, kB2 - kW2, kNumParams - kB2};

// Deterministic uniform numbers in [-1, 1) (SplitMix64), so every process builds the same data.
struct Rng {
  std::uint64_t s;
  double uniform() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

inline std::vector<float> init_params(std::uint64_t seed) {
  Rng rng{seed};
  std::vector<float> p(kNumParams);
  for (std::size_t i = 0; i < kNumParams; ++i) {
    p[i] = static_cast<float>(rng.uniform() * 0.5);
  }
  return p;
}

struct Dataset {
  std::vector<float> x;  // n * kIn
  std::vector<float> y;  // n * kOut
  std::size_t size() const { return y.size() / kOut; }
};

// Forward pass of one sample: hidden pre-activation h, activation a, output out.
inline void forward(const std::vector<float>& p, const float* x, float* h, float* a, float* out) {
  for (int j = 0; j < kHidden; ++j) {
    float s = p[kB1 + j];
    for (int i = 0; i < kIn; ++i) {
      s += p[kW1 + j * kIn + i] * x[i];
    }
    h[j] = s;
    a[j] = s > 0.0f ? s : 0.0f;
  }
  for (int k = 0; k < kOut; ++k) {
    float s = p[kB2 + k];
    for (int j = 0; j < kHidden; ++j) {
      s += p[kW2 + k * kHidden + j] * a[j];
    }
    out[k] = s;
  }
}

// n samples: x uniform in [-1, 1), y = a fixed random "teacher" network of the same shape.
inline Dataset make_dataset(std::size_t n, std::uint64_t seed = 7) {
  Dataset d;
  Rng rng{seed};
  d.x.resize(n * kIn);
  for (auto& v : d.x) {
    v = static_cast<float>(rng.uniform());
  }
  const std::vector<float> teacher = init_params(seed * 31 + 1);
  d.y.resize(n * kOut);
  float h[kHidden], a[kHidden];
  for (std::size_t s = 0; s < n; ++s) {
    forward(teacher, &d.x[s * kIn], h, a, &d.y[s * kOut]);
  }
  return d;
}

// Mean squared error of the batch and its gradient (written to grads, kNumParams floats).
// Backward runs layer 2 first: after it, on_ready(3) and on_ready(2) (b2, W2) are called, then
// after layer 1, on_ready(1) and on_ready(0) (b1, W1) -- the hook DDP uses to overlap the
// gradient allreduce of layer 2 with the backward pass of layer 1.
inline float loss_and_grad(const std::vector<float>& p, const Dataset& d, const std::size_t* batch,
                           std::size_t batch_size, std::vector<float>& grads,
                           const std::function<void(std::size_t)>& on_ready = {}) {
  grads.assign(kNumParams, 0.0f);
  std::vector<float> hs(batch_size * kHidden), as(batch_size * kHidden), dys(batch_size * kOut);
  double loss = 0.0;
  const float scale = 2.0f / static_cast<float>(batch_size * kOut);
  for (std::size_t b = 0; b < batch_size; ++b) {
    float out[kOut];
    forward(p, &d.x[batch[b] * kIn], &hs[b * kHidden], &as[b * kHidden], out);
    for (int k = 0; k < kOut; ++k) {
      const float diff = out[k] - d.y[batch[b] * kOut + k];
      loss += static_cast<double>(diff) * diff;
      dys[b * kOut + k] = diff * scale;
    }
  }
  for (std::size_t b = 0; b < batch_size; ++b) {  // layer 2
    for (int k = 0; k < kOut; ++k) {
      const float dy = dys[b * kOut + k];
      grads[kB2 + k] += dy;
      for (int j = 0; j < kHidden; ++j) {
        grads[kW2 + k * kHidden + j] += dy * as[b * kHidden + j];
      }
    }
  }
  if (on_ready) {
    on_ready(3);
    on_ready(2);
  }
  for (std::size_t b = 0; b < batch_size; ++b) {  // layer 1
    for (int j = 0; j < kHidden; ++j) {
      if (hs[b * kHidden + j] <= 0.0f) {
        continue;
      }
      float da = 0.0f;
      for (int k = 0; k < kOut; ++k) {
        da += p[kW2 + k * kHidden + j] * dys[b * kOut + k];
      }
      grads[kB1 + j] += da;
      for (int i = 0; i < kIn; ++i) {
        grads[kW1 + j * kIn + i] += da * d.x[batch[b] * kIn + i];
      }
    }
  }
  if (on_ready) {
    on_ready(1);
    on_ready(0);
  }
  return static_cast<float>(loss / static_cast<double>(batch_size * kOut));
}

inline void sgd_step(std::vector<float>& p, const std::vector<float>& grads, float lr) {
  for (std::size_t i = 0; i < kNumParams; ++i) {
    p[i] -= lr * grads[i];
  }
}

inline double checksum(const std::vector<float>& p) {
  double s = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    s += static_cast<double>(p[i]) * static_cast<double>((i % 7) + 1);
  }
  return s;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::fmax(m, std::fabs(a[i] - b[i]));
  }
  return a.size() == b.size() ? m : INFINITY;
}

// Hyper-parameters shared by ddp_train, its tests and the references.
struct Config {
  std::size_t dataset_size = 96;
  std::size_t global_batch = 16;  // split evenly: global_batch / world per rank
  int epochs = 5;
  float lr = 0.1f;
  std::uint64_t init_seed = 1000;  // rank r initializes with init_seed + r; rank 0's wins
  std::uint64_t sampler_seed = 42;
  int uneven_max_steps = 4;  // Join phase: rank r runs max(1, uneven_max_steps - r) steps
  std::uint64_t uneven_epoch = 100;
};

// Steps of rank r in the uneven (Join) phase.
inline int uneven_steps(const Config& c, int rank) {
  const int s = c.uneven_max_steps - rank;
  return s < 1 ? 1 : s;
}

}  // namespace toy
