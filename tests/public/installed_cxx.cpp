// SPDX-License-Identifier: BSD-3-Clause
// Built by install_test.sh against an installed chorus (pkg-config only, static library): an
// allreduce and a broadcast on the ranks of the launcher's environment.
#include <cstdio>
#include <vector>

#include <chorus/chorus.hpp>

int main() try {
  auto pg = chorus::init_from_env();
  std::vector<double> x(3, pg->rank() + 1.0);
  pg->allreduce(chorus::Tensor::of(x.data(), x.size()))->wait();
  std::vector<std::int64_t> token(1, pg->rank() == 0 ? 77 : 0);
  chorus::ddp::broadcast_tensors(*pg, {chorus::Tensor::of(token.data(), token.size())});
  std::printf("rank %d/%d: %g (expected %d) token %lld\n", pg->rank(), pg->size(), x[0],
              pg->size() * (pg->size() + 1) / 2, static_cast<long long>(token[0]));
  return 0;
} catch (const chorus::Error& e) {
  std::fprintf(stderr, "installed_cxx: %s\n", e.what());
  return 1;
}
