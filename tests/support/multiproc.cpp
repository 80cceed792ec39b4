// SPDX-License-Identifier: BSD-3-Clause
// Fork-based multi-process harness: children report through pipes, the parent waits on the
// pipes with a deadline (poll), then reaps; stragglers are SIGKILLed.
#include "support/multiproc.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include <chorus/errors.hpp>

namespace chorus::test {
namespace {

char g_test_name[512] = "(no test started)";

// The processes the watchdog kills before the binary exits (ranks being waited for, store
// servers): a signal handler reads the table, hence plain storage; a free slot holds 0.
constexpr int kMaxWatched = 256;
volatile sig_atomic_t g_watched[kMaxWatched];

void on_alarm(int) {
  const char prefix[] = "\n*** chorus test watchdog: binary ran past its time bound during test: ";
  (void)!write(2, prefix, sizeof(prefix) - 1);
  (void)!write(2, g_test_name, strnlen(g_test_name, sizeof(g_test_name)));
  (void)!write(2, "\n", 1);
  for (int i = 0; i < kMaxWatched; ++i) {
    if (const pid_t pid = g_watched[i]; pid > 0) {
      ::kill(pid, SIGCONT);  // a SIGSTOPped rank must be able to die
      ::kill(pid, SIGKILL);
    }
  }
  // Straight to the kernel: no core dump (abort's), and no exit interceptor of a sanitizer
  // runtime, which is not safe in a signal handler. 124: timeout(1)'s status for "timed out".
  ::syscall(SYS_exit_group, 124);
}

std::map<std::string, ChildEntry>& entries() {
  static std::map<std::string, ChildEntry> m;
  return m;
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

// Runs in the child: fn, then _exit with a code that says how it ended.
[[noreturn]] void child_main(int rank, const std::function<void(int)>& fn, int report_fd,
                             Duration timeout) {
  // Bound the child on its own as well, in case the parent dies before killing it.
  alarm(static_cast<unsigned>(scaled(timeout).count() / 1000 + 30));
  signal(SIGALRM, SIG_DFL);
  int code = kChildOk;
  std::string message;
  try {
    fn(rank);
  } catch (const ChildCheckFailed& e) {
    code = kChildFailed;
    message = e.message;
  } catch (const chorus::Error& e) {
    code = kChildChorusError + static_cast<int>(e.code());
    message = e.what();
  } catch (const std::exception& e) {
    code = kChildStdException;
    message = e.what();
  } catch (...) {
    code = kChildUnknown;
    message = "unknown exception";
  }
  write_all(report_fd, message);
  ::close(report_fd);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

}  // namespace

void watchdog_kills(pid_t pid) {
  for (int i = 0; i < kMaxWatched; ++i) {
    if (g_watched[i] == 0) {
      g_watched[i] = pid;
      return;
    }
  }
}

void watchdog_forgets(pid_t pid) {
  for (int i = 0; i < kMaxWatched; ++i) {
    if (g_watched[i] == pid) {
      g_watched[i] = 0;
    }
  }
}

double test_time_scale() {
  static const double scale = [] {
    const char* env = std::getenv("CHORUS_TEST_TIME_SCALE");
    const double value = env != nullptr ? std::atof(env) : 1.0;
    return value >= 1.0 ? value : 1.0;
  }();
  return scale;
}

Duration scaled(Duration bound) {
  return Duration{
      static_cast<Duration::rep>(static_cast<double>(bound.count()) * test_time_scale())};
}

void set_current_test_name(const std::string& name) {
  std::snprintf(g_test_name, sizeof(g_test_name), "%s", name.c_str());
}

void start_binary_watchdog(int seconds) {
  signal(SIGALRM, on_alarm);
  alarm(static_cast<unsigned>((seconds > 0 ? seconds : 240) * test_time_scale()));
}

void stop_binary_watchdog() { alarm(0); }

void register_child_entry(const char* name, ChildEntry entry) { entries()[name] = entry; }

bool dispatch_child_mode(int argc, char** argv, int& exit_code) {
  if (argc < 3 || std::strcmp(argv[1], "--chorus-child") != 0) {
    return false;
  }
  auto it = entries().find(argv[2]);
  if (it == entries().end()) {
    std::fprintf(stderr, "unknown child entry '%s'\n", argv[2]);
    exit_code = 2;
    return true;
  }
  exit_code = it->second(argc - 2, argv + 2);
  return true;
}

std::string self_exe() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) {
    throw std::runtime_error("readlink(/proc/self/exe) failed");
  }
  return std::string(path, static_cast<std::size_t>(n));
}

std::vector<ChildResult> run_processes(
    int n, const std::function<void(int rank)>& fn, Duration timeout,
    const std::function<void(const std::vector<pid_t>&)>& on_started) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<ChildResult> children(static_cast<std::size_t>(n));
  std::vector<int> pipes(static_cast<std::size_t>(n), -1);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::close(fds[0]);
      // Close the read ends inherited from earlier siblings.
      for (int fd : pipes) {
        if (fd >= 0) {
          ::close(fd);
        }
      }
      child_main(rank, fn, fds[1], timeout);
    }
    ::close(fds[1]);
    pipes[static_cast<std::size_t>(rank)] = fds[0];
    children[static_cast<std::size_t>(rank)].rank = rank;
    children[static_cast<std::size_t>(rank)].pid = pid;
    pids.push_back(pid);
  }
  if (on_started) {
    on_started(pids);
  }
  return wait_children(std::move(children), std::move(pipes), timeout);
}

std::vector<ChildResult> wait_children(std::vector<ChildResult> children, std::vector<int> pipes,
                                       Duration timeout) {
  const auto start = Clock::now();
  const Deadline deadline = Deadline::after(scaled(timeout));
  for (const ChildResult& child : children) {
    watchdog_kills(child.pid);
  }
  std::size_t open = 0;
  for (int fd : pipes) {
    open += fd >= 0 ? 1 : 0;
  }
  std::vector<std::string> messages(children.size());
  // A child's pipe reaches EOF when it exits (or closes it by exec'ing with CLOEXEC).
  while (open > 0) {
    std::vector<pollfd> pfds;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i] >= 0) {
        pfds.push_back({pipes[i], POLLIN, 0});
        index.push_back(i);
      }
    }
    const auto left = deadline.remaining();
    if (left <= Duration::zero()) {
      break;
    }
    const int ready =
        ::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      break;
    }
    for (std::size_t k = 0; k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) {
        continue;
      }
      const std::size_t i = index[k];
      char buf[4096];
      const ssize_t got = ::read(pipes[i], buf, sizeof(buf));
      if (got > 0) {
        messages[i].append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(pipes[i]);
        pipes[i] = -1;
        --open;
        children[i].elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
      }
    }
  }
  for (std::size_t i = 0; i < children.size(); ++i) {
    auto& child = children[i];
    if (pipes[i] >= 0) {
      ::kill(child.pid, SIGCONT);  // a SIGSTOPped child must be able to die
      ::kill(child.pid, SIGKILL);
      child.killed_at_deadline = true;
      ::close(pipes[i]);
      child.elapsed = std::chrono::duration_cast<Duration>(Clock::now() - start);
    }
    int status = 0;
    // The pipe closed, so the process has exited or is about to: a blocking waitpid is bounded.
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) {
      child.exited = true;
      child.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      child.signal = WTERMSIG(status);
    }
    child.message = messages[i];
    watchdog_forgets(child.pid);
  }
  return children;
}

std::string describe(const std::vector<ChildResult>& results) {
  std::string out;
  for (const auto& r : results) {
    out += "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + "): ";
    if (r.killed_at_deadline) {
      out += "KILLED at the test deadline";
    } else if (r.exited) {
      out += "exit " + std::to_string(r.exit_code);
    } else {
      out += "signal " + std::to_string(r.signal);
    }
    out += " after " + std::to_string(r.elapsed.count()) + " ms";
    if (!r.message.empty()) {
      out += ": " + r.message;
    }
    out += "\n";
  }
  return out;
}

}  // namespace chorus::test
