// SPDX-License-Identifier: BSD-3-Clause
// The machine's memory-copy bandwidth: the limit that shared-memory collectives are measured
// against (docs/results.md, "tcp backend: loopback limit, latency and bandwidth"). Copies SIZE
// bytes between two buffers ITERS times and prints the median GB/s (bytes copied per second), out
// of cache at large sizes and in cache at small ones.
//
//   memcpy_limit [SIZE [ITERS]]     SIZE with K/M/G suffixes (default 64M), ITERS default 20
//
// With THREADS=n in the environment, n threads copy at once (each its own buffers) and the
// sum is reported: what n ranks copying together get.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  std::size_t mult = 1;
  switch (end != nullptr ? *end : '\0') {
    case 'K':
    case 'k':
      mult = 1u << 10;
      break;
    case 'M':
    case 'm':
      mult = 1u << 20;
      break;
    case 'G':
    case 'g':
      mult = 1u << 30;
      break;
    default:
      break;
  }
  return static_cast<std::size_t>(v * static_cast<double>(mult));
}

// Median GB/s of `iters` copies of `bytes` on this thread.
double copy_rate(std::size_t bytes, int iters) {
  std::vector<char> a(bytes, 1);
  std::vector<char> b(bytes, 2);
  std::vector<double> rates;
  for (int i = 0; i < iters + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) {  // the first two fault the pages in
      rates.push_back(static_cast<double>(bytes) / s / 1e9);
    }
  }
  std::nth_element(rates.begin(), rates.begin() + static_cast<long>(rates.size() / 2), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? parse_size(argv[1]) : (64u << 20);
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  const char* threads_env = std::getenv("THREADS");
  const int threads = threads_env != nullptr ? std::max(1, std::atoi(threads_env)) : 1;
  if (bytes == 0 || iters < 1) {
    std::fprintf(stderr, "usage: memcpy_limit [SIZE[K|M|G] [ITERS]]\n");
    return 2;
  }
  std::vector<double> rates(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { rates[static_cast<std::size_t>(t)] = copy_rate(bytes, iters); });
  }
  for (auto& th : pool) {
    th.join();
  }
  double sum = 0;
  for (double r : rates) {
    sum += r;
  }
  std::printf("memcpy %zu bytes x %d threads: %.2f GB/s (median per thread %.2f)\n", bytes, threads,
              sum, sum / threads);
  return 0;
}
