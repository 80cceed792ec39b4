// SPDX-License-Identifier: BSD-3-Clause
// MPI_Allreduce (float32, sum) timed like all_reduce_perf, for the side-by-side tables in
// docs/results.md: Open MPI's shared-memory path (`mpirun --oversubscribe -np N`) and its
// TCP path (`--mca btl self,tcp`). Built only when an MPI is found (libopenmpi-dev).
//
//   mpirun -np N mpi_allreduce_perf SIZE [ITERS [WARMUP]]
//
// Prints "size_bytes time_us busbw_gbs median_us p99_us" from rank 0: time is the average over
// ITERS back-to-back out-of-place allreduces (each rank's average, the slowest rank's reported),
// busbw = size / time * 2(n-1)/n; median and p99 of rank 0's per-op times (all_reduce_perf's
// JSON has the same two).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2) {
    if (rank == 0) {
      std::fprintf(stderr, "usage: mpi_allreduce_perf SIZE_BYTES [ITERS [WARMUP]]\n");
    }
    MPI_Finalize();
    return 2;
  }
  const long bytes = std::atol(argv[1]);
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  const int warmup = argc > 3 ? std::atoi(argv[3]) : 3;
  const long count = bytes / 4 > 0 ? bytes / 4 : 1;
  std::vector<float> in(static_cast<std::size_t>(count), 1.0f);
  std::vector<float> out(static_cast<std::size_t>(count), 0.0f);
  for (int i = 0; i < warmup; ++i) {
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> op_us(static_cast<std::size_t>(iters));
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  for (int i = 0; i < iters; ++i) {
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const auto now = std::chrono::steady_clock::now();
    op_us[static_cast<std::size_t>(i)] =
        std::chrono::duration<double, std::micro>(now - last).count();
    last = now;
  }
  double us = std::chrono::duration<double, std::micro>(last - t0).count() / iters;
  std::sort(op_us.begin(), op_us.end());
  const auto at = [&](double q) {
    return op_us[std::min(op_us.size() - 1,
                          static_cast<std::size_t>(q * static_cast<double>(op_us.size())))];
  };
  double slowest = 0;
  MPI_Reduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double busbw = static_cast<double>(count * 4) / (slowest * 1e3) * 2.0 * (size - 1) / size;
    std::printf("%ld %.2f %.3f %.2f %.2f\n", count * 4, slowest, busbw, at(0.5), at(0.99));
  }
  MPI_Finalize();
  return out[0] == static_cast<float>(size) ? 0 : 1;
}
