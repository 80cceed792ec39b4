// SPDX-License-Identifier: BSD-3-Clause
// Catch2 runner for every chorus test binary. A watchdog alarm bounds the whole binary: if it
// runs past CHORUS_TEST_BINARY_TIMEOUT seconds (meson sets it just under the test's timeout;
// default 240) times CHORUS_TEST_TIME_SCALE, it prints the test that was running and exits, so a
// bug shows as a failure, never as a hung CI. The meson timeout is the outer bound.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "support/multiproc.hpp"

namespace {

struct CurrentTestListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    chorus::test::set_current_test_name(info.name);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CurrentTestListener)

int main(int argc, char** argv) {
  // A test re-executing this binary as a child rank dispatches before Catch sees the arguments.
  if (int code = 0; chorus::test::dispatch_child_mode(argc, argv, code)) {
    return code;
  }
  int seconds = 240;
  if (const char* env = std::getenv("CHORUS_TEST_BINARY_TIMEOUT")) {
    seconds = std::atoi(env);
  }
  // An alarm, not a thread: forked ranks do not inherit it, and tests fork before threads exist.
  chorus::test::start_binary_watchdog(seconds);
  const int result = Catch::Session().run(argc, argv);
  chorus::test::stop_binary_watchdog();
  return result;
}
