// SPDX-License-Identifier: BSD-3-Clause
// Links on demand (link_connector.hpp), over real processes: how many sockets a rank holds
// after the ops of a data-parallel job, links made by ops that need new peers (tagged
// send/recv whose dials cross, all_to_all), and failure news reaching ranks that have no link
// to the rank that died. Run with CHORUS_TRANSPORT=tcp (meson.build): the ranks of one host
// would otherwise all be linked at setup for their shared memory.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Sockets this process holds: the store client's, the group's listener and the links'.
int open_sockets() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) {
    throw ChildCheckFailed{"cannot read /proc/self/fd"};
  }
  while (const dirent* e = ::readdir(dir)) {
    char target[64] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    if (n > 0 && std::string(target, static_cast<std::size_t>(n)).rfind("socket:", 0) == 0) {
      ++count;
    }
  }
  ::closedir(dir);
  return count;
}

// Links held by a group with one data socket per peer: two sockets each, besides the store
// client's and the listener.
int links_held() { return (open_sockets() - 2) / 2; }

// Waits until `n` ranks arrived at `name`, through the store (a group barrier would link).
void store_barrier(Store& store, const std::string& name, int n) {
  if (store.add(name + "/count", 1) == n) {
    store.set(name + "/open", std::string_view("1"));
  }
  store.get(name + "/open", 60s);
}

// all_to_all of 2 floats per pair, each naming its source, destination and round; checked.
void all_to_all_checked(ProcessGroup& pg, int rank, int n, int round) {
  const auto value = [round](int src, int i) {
    return static_cast<float>(round * 100000 + src * 100 + i);
  };
  std::vector<float> in(static_cast<std::size_t>(n) * 2);
  std::vector<float> out(in.size(), -1.0f);
  for (int i = 0; i < n * 2; ++i) {
    in[static_cast<std::size_t>(i)] = value(rank, i);
  }
  pg.all_to_all(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()))->wait();
  for (int src = 0; src < n; ++src) {
    for (int j = 0; j < 2; ++j) {
      CHILD_CHECK(out[static_cast<std::size_t>(src * 2 + j)] == value(src, rank * 2 + j));
    }
  }
}

// Forks n ranks around one store server. Each sets `env`, makes a tcp group on loopback with
// `group_timeout` and runs body(rank, store, group); `bound` limits the whole run.
std::vector<ChildResult> run_group(
    int n, Duration group_timeout, Duration bound,
    const std::function<void(int rank, Store& store, ProcessGroup& pg)>& body,
    const std::vector<std::pair<std::string, std::string>>& env = {}) {
  StoreServerProcess server;
  const auto port = server.port();
  return run_processes(
      n,
      [&](int rank) {
        for (const auto& [name, value] : env) {
          ::setenv(name.c_str(), value.c_str(), 1);
        }
        auto store = child_store(port, std::max<Duration>(group_timeout, 30s));
        auto pg = make_tcp_group(store, rank, n, loopback_options(group_timeout));
        body(rank, *store, *pg);
      },
      bound);
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) {
    ++k;
  }
  return k;
}

}  // namespace

// 64 ranks run what data-parallel training runs (small and large allreduce, barrier). Each
// rank links to its ring neighbours, its recursive-doubling partners and its barrier
// partners: O(log N) peers, where a full mesh would hold 63.
TEST_CASE("a 64-rank allreduce and barrier job links each rank to O(log N) peers",
          "[tcp][mp][links]") {
  constexpr int kRanks = 64;
  auto results = run_group(kRanks, 120s, 180s, [](int rank, Store& store, ProcessGroup& pg) {
    // Counted before anyone's first op can dial this rank (a store barrier: a group barrier
    // would make links itself).
    const int after_setup = links_held();
    store_barrier(store, "counted", kRanks);
    CHILD_CHECK(after_setup <= 2);  // setup links the ring neighbours only
    std::vector<float> small(8, 1.0f);
    pg.allreduce(Tensor::of(small.data(), small.size()))->wait();
    std::vector<float> large(96 * 1024, 1.0f);  // 384 KiB: the ring
    pg.allreduce(Tensor::of(large.data(), large.size()))->wait();
    pg.barrier()->wait();
    CHILD_CHECK(small[0] == kRanks && small[7] == kRanks);
    CHILD_CHECK(large.front() == kRanks && large.back() == kRanks);
    const int links = links_held();
    // ring (2) + recursive doubling (log2 N) + dissemination barrier (2 log2 N)
    const int bound = 2 + 3 * ceil_log2(kRanks);
    if (links > bound) {
      throw ChildCheckFailed{fmt::format("rank {} holds {} links (bound {})", rank, links, bound)};
    }
    store.set(fmt::format("links/{}", rank), std::to_string(links));
    pg.barrier()->wait();
    if (rank == 0) {
      std::vector<int> all;
      for (int r = 0; r < kRanks; ++r) {
        all.push_back(std::stoi(store.get_string(fmt::format("links/{}", r), 30s)));
      }
      std::sort(all.begin(), all.end());
      std::fprintf(stderr,
                   "links per rank after allreduce + barrier at %d ranks: min %d, median %d, "
                   "max %d (a full mesh: %d)\n",
                   kRanks, all.front(), all[all.size() / 2], all.back(), kRanks - 1);
    }
  });
  REQUIRE_ALL_OK(results);
}

// Every rank sends to and receives from the rank opposite it on the ring at the same time:
// both ends of each pair dial at once, and the lower rank's link wins. Then all_to_all links
// everyone to everyone.
TEST_CASE("crossing dials from tagged send/recv, then all_to_all, link every pair once",
          "[tcp][mp][links]") {
  constexpr int kRanks = 8;
  auto results = run_group(kRanks, 60s, 120s, [](int rank, Store& store, ProcessGroup& pg) {
    const int opposite = (rank + kRanks / 2) % kRanks;
    std::vector<float> out(1000, static_cast<float>(rank));
    std::vector<float> in(1000, -1.0f);
    auto sent = pg.send(Tensor::of(out.data(), out.size()), opposite, 7);
    auto got = pg.recv(Tensor::of(in.data(), in.size()), opposite, 7);
    sent->wait();
    got->wait();
    CHILD_CHECK(in.front() == opposite && in.back() == opposite);
    // The two ring neighbours and the opposite rank. Where both ends dialled, the losing
    // connection is closed by the link connector's thread, maybe just after the op completed:
    // wait for it, bounded.
    const auto settled_by = Clock::now() + 10s;
    while (links_held() != 3 && Clock::now() < settled_by) {
      ::usleep(10'000);
    }
    const int sockets = open_sockets();
    // Through the store, not the group: a barrier would link the barrier partners, and
    // all_to_all on a rank that went ahead would link to this one before it counted. Checked
    // after it, so that a failed check does not leave the others waiting out the barrier.
    store_barrier(store, "counted", kRanks);
    if ((sockets - 2) / 2 != 3) {
      throw ChildCheckFailed{
          fmt::format("rank {} holds {} sockets after the tagged exchange", rank, sockets)};
    }

    all_to_all_checked(pg, rank, kRanks, 0);
    const auto linked_by = Clock::now() + 10s;  // a crossing dial's loser may still be closing
    while (links_held() != kRanks - 1 && Clock::now() < linked_by) {
      ::usleep(10'000);
    }
    CHILD_CHECK(links_held() == kRanks - 1);
    pg.barrier()->wait();
  });
  REQUIRE_ALL_OK(results);
}

// Rank 5 dies after a ring allreduce (so only ranks 4 and 6 hold a link to it). Its neighbours
// see the link break; every other rank hears it from the notices passed on along the links,
// at once, naming rank 5.
TEST_CASE("ranks with no link to a killed rank fail at once, naming it", "[tcp][mp][links]") {
  constexpr int kRanks = 8;
  auto results = run_group(kRanks, 60s, 90s, [](int rank, Store&, ProcessGroup& pg) {
    std::vector<float> data(96 * 1024, 1.0f);
    const auto t0 = Clock::now();
    // Everything inside: rank 5 dies right after its first allreduce, which may still be
    // finishing on the others when the news arrives.
    const Error e = expect_error([&] {
      pg.allreduce(Tensor::of(data.data(), data.size()))->wait();
      if (rank == 5) {
        ::kill(::getpid(), SIGKILL);
      }
      pg.allreduce(Tensor::of(data.data(), data.size()))->wait();
    });
    const double took = seconds_since(t0);
    if (!(contains(e.what(), "rank 5") && took < 10.0)) {
      throw ChildCheckFailed{fmt::format("after {:.3f} s: {}", took, e.what())};
    }
  });
  INFO(describe(results));
  for (int r = 0; r < kRanks; ++r) {
    if (r == 5) {
      CHECK(results[static_cast<std::size_t>(r)].signal == SIGKILL);
    } else {
      CHECK(results[static_cast<std::size_t>(r)].ok());
    }
  }
}

// CHORUS_MAX_PEER_SOCKETS=8 (4 links of 2 sockets): all_to_all needs all 15 peers at once and
// gets them; once it is done, idle links are released by agreement until each rank holds at
// most 4 again. The next rounds link again (reuse), with the same results, and a tagged
// message that arrived before its recv survives the release of its link.
TEST_CASE("CHORUS_MAX_PEER_SOCKETS: idle links are released, and linked again when needed",
          "[tcp][mp][links]") {
  constexpr int kRanks = 16;
  constexpr int kMaxLinks = 4;
  auto results = run_group(
      kRanks, 60s, 120s,
      [](int rank, Store& store, ProcessGroup& pg) {
        // Sent early to the rank opposite; received only after the links were released.
        const int opposite = (rank + kRanks / 2) % kRanks;
        float early = static_cast<float>(rank);
        pg.send(Tensor::of(&early, 1), opposite, 99)->wait();
        for (int round = 0; round < 3; ++round) {
          all_to_all_checked(pg, rank, kRanks, round);
          // Everyone is done with the round before anyone checks (a rank already in the next
          // round would keep its links to this one busy); through the store, not the group.
          store_barrier(store, fmt::format("round{}", round), kRanks);
          // The releases take a few round trips after the op: wait for them, bounded.
          const auto until = Clock::now() + 20s;
          while (links_held() > kMaxLinks && Clock::now() < until) {
            ::usleep(10'000);
          }
          if (links_held() > kMaxLinks) {
            throw ChildCheckFailed{fmt::format("rank {} still holds {} links after round {}", rank,
                                               links_held(), round)};
          }
          store_barrier(store, fmt::format("checked{}", round), kRanks);
        }
        float got = -1.0f;
        pg.recv(Tensor::of(&got, 1), opposite, 99)->wait();
        CHILD_CHECK(got == static_cast<float>(opposite));
      },
      {{"CHORUS_MAX_PEER_SOCKETS", "8"}});
  REQUIRE_ALL_OK(results);
}

// Rank 2 never issues the all_to_all. Rank 0 has no link to it before the op (ring neighbours
// 1 and 3); the op's dial is answered by rank 2's link connector, which runs whatever rank 2's
// program does, so rank 0's timeout names rank 2 from the status probe like its neighbours'.
// The probe's answer is "has not issued this op yet"; on a loaded machine the answer can miss
// the probe's grace (a tenth of the 2 s timeout), and then it says so, still naming rank 2.
TEST_CASE("a timeout names a peer that was linked by the op itself", "[tcp][mp][links]") {
  constexpr int kRanks = 4;
  auto results = run_group(kRanks, 2s, 60s, [](int rank, Store& store, ProcessGroup& pg) {
    if (rank == 2) {
      store_barrier(store, "checked", kRanks);  // after the others saw their errors
      return;
    }
    std::vector<float> in(kRanks), out(kRanks);
    const Error e = expect_error([&] {
      pg.all_to_all(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()))->wait();
    });
    // Checked after the barrier: a failed check must not leave rank 2 waiting out the barrier.
    store_barrier(store, "checked", kRanks);
    const auto& peers = e.context().peers;
    const bool probe_named_rank2 =
        contains(e.what(), "rank 2 (") && (contains(e.what(), "has not issued this op yet") ||
                                           contains(e.what(), "did not answer a status probe"));
    if (std::find(peers.begin(), peers.end(), 2) == peers.end() || !probe_named_rank2) {
      throw ChildCheckFailed{e.what()};
    }
  });
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
