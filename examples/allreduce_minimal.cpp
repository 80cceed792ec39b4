// SPDX-License-Identifier: BSD-3-Clause
// The shortest correct chorus program: every rank adds its rank + 1; run with chorusrun -n 4.
#include <cstdio>
#include <exception>
#include <vector>

#include <chorus/chorus.hpp>

// A setup error (no launcher variables, no store) ends with its message and status 1.
int main() try {
  auto pg = chorus::init_from_env();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher
  std::vector<float> x(4, static_cast<float>(pg->rank() + 1));
  pg->allreduce(chorus::Tensor::of(x.data(), x.size()))->wait();  // in place, sum
  const int expected = pg->size() * (pg->size() + 1) / 2;
  std::printf("rank %d/%d: %g (expected %d)\n", pg->rank(), pg->size(), static_cast<double>(x[0]),
              expected);
  return x[0] == static_cast<float>(expected) ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "allreduce_minimal: %s\n", e.what());
  return 1;
}
