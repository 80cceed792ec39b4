// SPDX-License-Identifier: BSD-3-Clause
// Two jobs of two ranks each on one long-lived store (CHORUS_STORE_ADDR), through
// init_world_from_env as a user's program calls it, in every order the four processes can
// arrive in. Each job either works on its own (the right sum) or fails at once with a message
// that says what to do; never a group made of both jobs' ranks (a wrong sum).
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chorus/chorus.hpp>

#include "support/multiproc.hpp"

namespace chorus::test {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<TcpStore> store_client(std::uint16_t port) {
  return std::make_shared<TcpStore>(
      TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 30s});
}

// Process p is job p / 2, rank p % 2; it arrives after the processes before it in `order`
// (each sets "arrived/<p>" in a side namespace just before init; the next waits for it).
// Job j's ranks contribute 1 (job 0) or 100 (job 1), so a mixed group sums to 101.
std::vector<ChildResult> run_jobs(std::uint16_t port, const std::array<int, 4>& order,
                                  bool with_run_ids, const std::string& tag) {
  return run_processes(
      4,
      [&](int p) {
        const int job = p / 2;
        const int rank = p % 2;
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", "2", 1);
        ::setenv("CHORUS_STORE_ADDR", fmt::format("127.0.0.1:{}", port).c_str(), 1);
        ::setenv("CHORUS_SOCKET_IFNAME", "127.0.0.1", 1);
        ::setenv("CHORUS_TIMEOUT", "30s", 1);
        if (with_run_ids) {
          ::setenv("CHORUS_RUN_ID", fmt::format("{}-job{}", tag, job).c_str(), 1);
        } else {
          ::unsetenv("CHORUS_RUN_ID");
        }
        auto side = make_prefix_store("order/" + tag, store_client(port));
        const auto at =
            static_cast<std::size_t>(std::find(order.begin(), order.end(), p) - order.begin());
        if (at > 0) {
          side->get(fmt::format("arrived/{}", order[at - 1]), 30s);
        }
        side->set(fmt::format("arrived/{}", p), std::string_view("1"));
        World world = init_world_from_env(Backend::tcp);
        float x = job == 0 ? 1.0f : 100.0f;
        world.group->allreduce(Tensor::of(&x, 1))->wait();
        CHILD_CHECK(x == (job == 0 ? 2.0f : 200.0f));
      },
      60s);
}

}  // namespace

TEST_CASE("two jobs on one store never mix, whatever the start order", "[launcher][jobs][mp]") {
  StoreServerProcess server;
  std::array<int, 4> order{0, 1, 2, 3};
  int n = 0;
  do {
    const std::string tag = fmt::format("o{}", n++);
    INFO("start order " << order[0] << order[1] << order[2] << order[3]);
    {
      // Distinct run ids: both jobs work, each with its own sum.
      const auto ok = run_jobs(server.port(), order, true, tag);
      INFO(describe(ok));
      for (const auto& r : ok) {
        CHECK(r.ok());
      }
      // No run id on a shared store: every rank refuses at once and says to set CHORUS_RUN_ID.
      const auto refused = run_jobs(server.port(), order, false, tag + "-noid");
      INFO(describe(refused));
      for (const auto& r : refused) {
        CHECK(r.exit_code == kChildChorusError + static_cast<int>(ErrorCode::invalid_argument));
        CHECK(r.message.find("CHORUS_RUN_ID") != std::string::npos);
      }
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

}  // namespace chorus::test
