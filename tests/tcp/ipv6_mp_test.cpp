// SPDX-License-Identifier: BSD-3-Clause
// A tcp group over IPv6 loopback (::1), in its own binary so that a machine without IPv6
// reports SKIP (exit 77, meson's skip code) instead of a pass: before any test case runs, the
// listener below binds ::1 and exits 77, saying why, when that fails.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "net/listener.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

struct SkipWithoutIpv6Loopback : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    try {
      net::Listener::bind("::1", 0);
    } catch (const std::exception& e) {
      std::printf(
          "SKIP %s: IPv6 loopback (::1) is not available here: %s. Enable IPv6 on lo "
          "(sysctl net.ipv6.conf.lo.disable_ipv6=0) to run this test.\n",
          info.name.c_str(), e.what());
      std::fflush(stdout);
      std::_Exit(77);
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutIpv6Loopback)

TEST_CASE("a group over IPv6 loopback", "[tcp][mp]") {
  StoreServerProcess server;
  const auto results = run_processes(
      3,
      [&](int rank) {
        auto pg = make_tcp_group(child_store(server.port()), rank, 3, loopback_options(30s, "::1"));
        int x = rank;
        pg->allreduce(Tensor::of(&x, 1))->wait();
        CHILD_CHECK(x == 3);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
