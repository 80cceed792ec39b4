// SPDX-License-Identifier: BSD-3-Clause
// The model of elastic_train: linear regression on synthetic data, in double precision. A step's
// global batch is the same whatever the world size (sample i of step s is a fixed function of
// (s, i)) and each rank takes the samples i with i % world == rank, so the averaged gradient,
// and hence the trained parameters, do not depend on how many ranks computed them: a run that
// loses ranks must end where a single process ends. Header-only, std only; the tests compute
// their reference with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace elastic {

inline constexpr std::size_t kParams = 16;
inline constexpr int kBatch = 48;  // samples per step, over all ranks
inline constexpr double kLearningRate = 0.05;

// Deterministic uniform numbers in [-1, 1) (SplitMix64).
inline double uniform(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

// The gradient of this rank's share of step `step`, summed (not averaged), followed by the
// share's summed squared error: kParams + 1 values, to be summed over the ranks.
inline std::vector<double> local_gradient(const std::vector<double>& w, int step, int rank,
                                          int world) {
  std::vector<double> out(kParams + 1, 0.0);
  for (int i = rank; i < kBatch; i += world) {
    std::uint64_t state = static_cast<std::uint64_t>(step) * 1000003u + static_cast<unsigned>(i);
    double x[kParams];
    double target = 0.0;
    double prediction = 0.0;
    for (std::size_t j = 0; j < kParams; ++j) {
      x[j] = uniform(state);
      target += x[j] * static_cast<double>(j + 1) / kParams;  // the true weights
      prediction += x[j] * w[j];
    }
    target += 0.01 * uniform(state);  // noise
    const double error = prediction - target;
    for (std::size_t j = 0; j < kParams; ++j) {
      out[j] += 2.0 * error * x[j];
    }
    out[kParams] += error * error;
  }
  return out;
}

// Applies the summed gradient of a whole step; returns the step's mean loss.
inline double apply_step(std::vector<double>& w, const std::vector<double>& summed) {
  for (std::size_t j = 0; j < kParams; ++j) {
    w[j] -= kLearningRate * summed[j] / kBatch;
  }
  return summed[kParams] / kBatch;
}

// Single-process training for `steps` steps from zero: the reference.
inline std::vector<double> reference(int steps) {
  std::vector<double> w(kParams, 0.0);
  for (int step = 1; step <= steps; ++step) {
    apply_step(w, local_gradient(w, step, 0, 1));
  }
  return w;
}

inline double sum(const std::vector<double>& w) {
  double s = 0.0;
  for (double v : w) {
    s += v;
  }
  return s;
}

}  // namespace elastic
