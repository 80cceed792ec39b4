// SPDX-License-Identifier: BSD-3-Clause
// allreduce timing driver for the tcp backend (built, not run as a test; bench/ has the
// nccl-tests-style tools). Forks N ranks over loopback and prints, per size, the median time
// of one allreduce (float32 sum, in place, barrier before each) with algbw and busbw in GB/s
// (1e9), busbw = algbw * 2(n-1)/n.
//
//   allreduce_timing -n 4 -b 8 -b 1048576 -b 67108864 -i 20 [--small-bytes B] [--slice-bytes B]
//                    [--sockets K]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tcp/mp_common.hpp"

using namespace chorus;
using namespace chorus::test;

int main(int argc, char** argv) {
  int n = 2;
  int iters = 20;
  int warmup = 3;
  std::vector<std::size_t> sizes;
  TcpGroupOptions o = loopback_options(120s);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (a == "-n") {
      n = static_cast<int>(v);
    } else if (a == "-b") {
      sizes.push_back(static_cast<std::size_t>(v));
    } else if (a == "-i") {
      iters = static_cast<int>(v);
    } else if (a == "-w") {
      warmup = static_cast<int>(v);
    } else if (a == "--small-bytes") {
      o.small_allreduce_bytes = static_cast<std::size_t>(v);
    } else if (a == "--slice-bytes") {
      o.slice_bytes = static_cast<std::size_t>(v);
    } else if (a == "--sockets") {
      o.sockets_per_peer = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (sizes.empty()) {
    sizes = {8, 1 << 20, 64 << 20};
  }
  StoreServerProcess server;
  const auto results = run_processes(
      n,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, n, o);
        if (rank == 0) {
          std::printf(
              "# allreduce float32 sum in place, %d ranks, small_allreduce_bytes %zu, slice_bytes %zu, "
              "sockets_per_peer %d; median of %d\n",
              n, o.small_allreduce_bytes, o.slice_bytes, o.sockets_per_peer, iters);
          std::printf("%12s %12s %12s %10s %10s\n", "bytes", "time_us", "min_us", "algbw", "busbw");
        }
        for (std::size_t bytes : sizes) {
          std::vector<float> buf(std::max<std::size_t>(1, bytes / 4), 1.0f);
          const Tensor t = Tensor::of(buf.data(), bytes / 4);
          std::vector<double> times;
          // Latency sizes: many back-to-back ops per sample; bandwidth sizes: one per sample.
          const int reps = bytes <= 4096 ? 200 : 1;
          for (int i = 0; i < warmup + iters; ++i) {
            pg->barrier()->wait();
            const auto t0 = Clock::now();
            for (int r = 0; r < reps; ++r) {
              pg->allreduce(t)->wait();
            }
            const double us =
                std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
            if (i >= warmup) {
              times.push_back(us);
            }
          }
          std::sort(times.begin(), times.end());
          const double med = times[times.size() / 2];
          const double algbw = static_cast<double>(bytes) / (med * 1e-6) / 1e9;
          const double busbw = algbw * 2.0 * (n - 1) / n;
          if (rank == 0) {
            std::printf("%12zu %12.1f %12.1f %10.3f %10.3f\n", bytes, med, times.front(), algbw,
                        busbw);
            std::fflush(stdout);
          }
        }
      },
      600s);
  for (const auto& r : results) {
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", describe(results).c_str());
      return 1;
    }
  }
  return 0;
}
