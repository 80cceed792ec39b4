// SPDX-License-Identifier: BSD-3-Clause
// DistributedSampler: torch's sharding semantics over a permutation every rank computes alike.
#include <chorus/ddp.hpp>

#include <numeric>

#include <fmt/format.h>

namespace chorus::ddp {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, fully specified, so the permutation is
// the same on every platform, unlike std::uniform_int_distribution whose algorithm is
// implementation-defined.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (rejection of the short tail).
  std::uint64_t below(std::uint64_t bound) noexcept {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
    std::uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % bound;
  }
};

}  // namespace

std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed,
                                            std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Mix (seed, epoch) so that nearby pairs give unrelated streams.
  SplitMix64 mixer{seed};
  SplitMix64 rng{mixer.next() ^ (epoch * 0xd1b54a32d192ed03ULL)};
  rng.next();
  for (std::size_t i = n; i > 1; --i) {  // Fisher-Yates
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw InvalidArgument(fmt::format(
        "DistributedSampler: rank {} is not in [0, num_replicas = {}); pass the group's rank and size",
        rank, num_replicas));
  }
  const auto r = static_cast<std::size_t>(num_replicas);
  // torch: with drop_last and a ragged tail, ceil((n - r) / r) == floor(n / r); else ceil(n / r).
  num_samples_ = options.drop_last ? dataset_size / r : (dataset_size + r - 1) / r;
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, const ProcessGroup& group,
                                       SamplerOptions options)
    : DistributedSampler(dataset_size, group.size(), group.rank(), options) {}

std::vector<std::size_t> DistributedSampler::indices() const {
  std::vector<std::size_t> order;
  if (options_.shuffle) {
    order = seeded_permutation(dataset_size_, options_.seed, epoch_);
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  const std::size_t total = total_size();
  if (order.size() > total) {
    order.resize(total);  // drop_last: the tail nobody could share evenly
  } else if (!order.empty()) {
    // Padding: wrap around to the start (repeatedly when the dataset is smaller than replicas).
    const std::size_t n = order.size();
    for (std::size_t i = 0; order.size() < total; ++i) {
      order.push_back(order[i % n]);
    }
  }
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < order.size();
       i += static_cast<std::size_t>(num_replicas_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

}  // namespace chorus::ddp
