// SPDX-License-Identifier: BSD-3-Clause
// The nccl backend with two ranks, one thread and one GPU each, in one process (skips, exit
// 77, with fewer than two devices): split gives members a working subgroup with their new
// rank and size, and non-members nullptr; allgatherv with uneven blocks; tags and receives from
// any source are refused (NCCL has neither).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

#include "local_store.hpp"

using namespace chorus;
using namespace std::chrono_literals;

namespace {

// What one rank saw, checked on the main thread (Catch assertions are not thread-safe).
struct RankResult {
  std::string error;       // an exception a rank threw, if any
  bool got_child = false;  // split() returned a group
  int child_rank = -1;
  int child_size = -1;
  std::vector<std::int32_t> child_sum;   // allreduce(sum) on the subgroup
  std::vector<std::int32_t> parent_sum;  // allreduce(sum) on the parent afterwards
  bool tag_refused = false;              // send with tag 7: InvalidArgument (nccl has no tags)
  bool any_source_refused = false;       // recv from kAnySource: InvalidArgument
  std::vector<std::int32_t> gathered;    // allgatherv on the parent: rank q gives q + 1 values
};

// allgatherv on `pg`: rank q contributes q + 1 copies of q + 1.
std::vector<std::int32_t> run_allgatherv(ProcessGroup& pg, int device) {
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (int q = 0; q < pg.size(); ++q) {
    counts.push_back(static_cast<std::size_t>(q + 1));
    total += static_cast<std::size_t>(q + 1);
  }
  const std::size_t mine = counts[static_cast<std::size_t>(pg.rank())];
  std::vector<std::int32_t> host(mine, pg.rank() + 1);
  void* in = nullptr;
  void* out = nullptr;
  if (cudaMalloc(&in, mine * 4) != cudaSuccess || cudaMalloc(&out, total * 4) != cudaSuccess) {
    throw std::runtime_error("cudaMalloc failed");
  }
  cudaMemcpy(in, host.data(), mine * 4, cudaMemcpyHostToDevice);
  pg.allgatherv(Tensor(in, mine, DataType::int32, Device::cuda(device)),
                Tensor(out, total, DataType::int32, Device::cuda(device)), counts)
      ->synchronize();
  std::vector<std::int32_t> result(total);
  cudaMemcpy(result.data(), out, total * 4, cudaMemcpyDeviceToHost);
  cudaFree(in);
  cudaFree(out);
  return result;
}

std::vector<std::int32_t> run_allreduce(ProcessGroup& pg, int device, std::int32_t value,
                                        std::size_t n) {
  std::vector<std::int32_t> host(n, value);
  void* buf = nullptr;
  if (cudaMalloc(&buf, n * 4) != cudaSuccess) {
    throw std::runtime_error("cudaMalloc failed");
  }
  cudaMemcpy(buf, host.data(), n * 4, cudaMemcpyHostToDevice);
  pg.allreduce(Tensor(buf, n, DataType::int32, Device::cuda(device)))->synchronize();
  cudaMemcpy(host.data(), buf, n * 4, cudaMemcpyDeviceToHost);
  cudaFree(buf);
  return host;
}

}  // namespace

TEST_CASE("split: members get their new rank and size and a working subgroup, others nullptr",
          "[nccl][gpu][split]") {
  // World of 3 when three GPUs are there (members {0, 2}: the new ranks are not the old
  // ones), else 2 (members {1}).
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  const int world = devices >= 3 ? 3 : 2;
  const std::vector<int> members = world == 3 ? std::vector<int>{0, 2} : std::vector<int>{1};
  constexpr std::size_t n = 257;
  auto store = std::make_shared<test::LocalStore>();
  std::vector<RankResult> results(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      RankResult& r = results[static_cast<std::size_t>(rank)];
      try {
        if (cudaSetDevice(rank) != cudaSuccess) {
          throw std::runtime_error("cudaSetDevice failed");
        }
        auto pg = make_nccl_group(store, rank, world,
                                  {.group = {.name = "parent", .timeout = 60s}, .device = rank});
        auto child = pg->split(members, {.name = "child"});
        r.got_child = child != nullptr;
        if (child) {
          r.child_rank = child->rank();
          r.child_size = child->size();
          r.child_sum = run_allreduce(*child, rank, rank + 1, n);
        }
        r.parent_sum = run_allreduce(*pg, rank, rank + 1, n);
        r.gathered = run_allgatherv(*pg, rank);
        // Refused on the calling rank before anything is issued: nothing to match on the peer.
        void* one = nullptr;
        if (cudaMalloc(&one, 4) != cudaSuccess) {
          throw std::runtime_error("cudaMalloc failed");
        }
        const Tensor t(one, 1, DataType::int32, Device::cuda(rank));
        try {
          pg->send(t, (rank + 1) % world, 7);
        } catch (const InvalidArgument&) {
          r.tag_refused = true;
        }
        try {
          pg->recv(t, kAnySource);
        } catch (const InvalidArgument&) {
          r.any_source_refused = true;
        }
        cudaFree(one);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  std::int32_t member_total = 0;
  for (int m : members) {
    member_total += m + 1;
  }
  const std::int32_t world_total = world * (world + 1) / 2;
  for (int rank = 0; rank < world; ++rank) {
    const RankResult& r = results[static_cast<std::size_t>(rank)];
    INFO("rank " << rank << " of " << world);
    REQUIRE(r.error.empty());
    const auto it = std::find(members.begin(), members.end(), rank);
    if (it == members.end()) {
      CHECK_FALSE(r.got_child);  // a non-member gets nullptr
    } else {
      REQUIRE(r.got_child);
      CHECK(r.child_rank == static_cast<int>(it - members.begin()));
      CHECK(r.child_size == static_cast<int>(members.size()));
      CHECK(r.child_sum == std::vector<std::int32_t>(n, member_total));
    }
    CHECK(r.parent_sum == std::vector<std::int32_t>(n, world_total));
    std::vector<std::int32_t> want_gathered;
    for (int q = 0; q < world; ++q) {
      want_gathered.insert(want_gathered.end(), static_cast<std::size_t>(q + 1), q + 1);
    }
    CHECK(r.gathered == want_gathered);
    CHECK(r.tag_refused);
    CHECK(r.any_source_refused);
  }
}
