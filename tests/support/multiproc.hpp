// SPDX-License-Identifier: BSD-3-Clause
// Multi-process test harness: fork real ranks, bound them in time, collect what each reported.
//
// Rules (STYLE.md 2.8): fork before the parent starts any thread; children report through a
// pipe and _exit(); the parent waits on the pipes with a deadline and SIGKILLs every child
// that outlives it. Never sleep to synchronize.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

namespace chorus {
struct TcpStoreServerOptions;
}

namespace chorus::test {

// Exit codes a child uses to say how fn ended.
enum ChildExit : int {
  kChildOk = 0,
  kChildFailed = 1,         // a REQUIRE-like check failed (message in `message`)
  kChildChorusError = 10,   // fn threw chorus::Error; +code (10 + ErrorCode)
  kChildStdException = 30,  // fn threw another std::exception
  kChildUnknown = 31,
};

struct ChildResult {
  int rank = -1;
  pid_t pid = -1;
  bool exited = false;  // exited normally (vs. killed by a signal)
  int exit_code = -1;   // when exited
  int signal = 0;       // when killed
  bool killed_at_deadline = false;
  std::string message;  // what the child reported (exception what(), failed check)
  Duration elapsed{0};  // from fork to exit, as seen by the parent
  bool ok() const { return exited && exit_code == kChildOk; }
};

// Thrown inside a child by CHILD_CHECK to fail with a message.
struct ChildCheckFailed {
  std::string message;
};

// How much slower than a plain build this run is allowed to be: CHORUS_TEST_TIME_SCALE (the
// sanitizer legs export their meson --timeout-multiplier), 1 when unset. Every hard bound of the
// harness (the binary's watchdog, the ranks' deadline) is scaled by it: the bounds catch hangs,
// and a TSan build on a busy 2-core machine runs a healthy case several times slower.
double test_time_scale();
Duration scaled(Duration bound);

// Forks n children; child i runs fn(i). Waits for all of them until `timeout` (scaled), then
// SIGKILLs the rest (marked killed_at_deadline). Returns one result per rank, in rank order.
// `on_started(pids)` runs in the parent right after forking (e.g. to SIGSTOP/SIGKILL one).
std::vector<ChildResult> run_processes(
    int n, const std::function<void(int rank)>& fn, Duration timeout,
    const std::function<void(const std::vector<pid_t>&)>& on_started = {});

// Waits for the given children (already forked by the caller with fork_child) until timeout
// (scaled).
std::vector<ChildResult> wait_children(std::vector<ChildResult> children, std::vector<int> pipes,
                                       Duration timeout);

// A TcpStore server in its own forked process, listening on 127.0.0.1 with port 0.
// Destruction kills it. Create it before anything starts threads in the parent.
class StoreServerProcess {
 public:
  StoreServerProcess();  // 127.0.0.1, a free port, default limits
  // host and port of `options` are replaced by 127.0.0.1 and a free port.
  explicit StoreServerProcess(const TcpStoreServerOptions& options);
  ~StoreServerProcess();
  StoreServerProcess(const StoreServerProcess&) = delete;
  StoreServerProcess& operator=(const StoreServerProcess&) = delete;
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// Summary of every child's result, for a failure message.
std::string describe(const std::vector<ChildResult>& results);

// For main(): "--chorus-child NAME ARGS..." runs the entry point registered under NAME
// (for tests that must exec a fresh process, e.g. after threads exist).
using ChildEntry = int (*)(int argc, char** argv);
void register_child_entry(const char* name, ChildEntry entry);
bool dispatch_child_mode(int argc, char** argv, int& exit_code);
// SIGALRM after `seconds` (scaled): prints the running test's name, SIGKILLs the processes
// given to watchdog_kills and exits with status 124, without a core dump (a core of a sanitized
// process can take minutes to write where core_pattern is a pipe).
void start_binary_watchdog(int seconds);
// The processes the watchdog takes down with the binary (ranks, store servers): added while
// they live, forgotten once reaped. At most 256 at a time; more are left to their own alarms.
void watchdog_kills(pid_t pid);
void watchdog_forgets(pid_t pid);
void stop_binary_watchdog();
void set_current_test_name(const std::string& name);

// Path of the running test binary (for re-exec).
std::string self_exe();

}  // namespace chorus::test

// Inside a child's fn: fail this rank with a message (the parent sees it in ChildResult).
#define CHILD_CHECK(cond)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      throw ::chorus::test::ChildCheckFailed{std::string(__FILE__) + ":" +           \
                                             std::to_string(__LINE__) + ": " #cond}; \
    }                                                                                \
  } while (0)

// In the parent: every rank must have exited 0.
#define REQUIRE_ALL_OK(results)              \
  do {                                       \
    INFO(::chorus::test::describe(results)); \
    for (const auto& r_ : (results)) {       \
      REQUIRE(r_.ok());                      \
    }                                        \
  } while (0)
