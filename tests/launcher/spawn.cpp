// SPDX-License-Identifier: BSD-3-Clause
// fork/exec helpers for the launcher tests: every wait is bounded, leftovers are SIGKILLed.
#include "spawn.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

extern char** environ;

namespace launcher_test {
namespace {

using Clock = std::chrono::steady_clock;

// 1: read data; 0: nothing within the timeout; -1: closed.
int read_some(Process& p, int timeout_ms) {
  if (p.out_fd < 0) {
    return -1;
  }
  pollfd fd{p.out_fd, POLLIN, 0};
  if (::poll(&fd, 1, timeout_ms) <= 0) {
    return 0;
  }
  char buf[65536];
  const ssize_t got = ::read(p.out_fd, buf, sizeof(buf));
  if (got > 0) {
    p.output.append(buf, static_cast<std::size_t>(got));
    return 1;
  }
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
    return 0;
  }
  ::close(p.out_fd);
  p.out_fd = -1;
  return -1;
}

int ms_left(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  return static_cast<int>(std::max<long long>(0, left.count()));
}

}  // namespace

const std::vector<std::string>& launcher_vars() {
  static const std::vector<std::string> kVars = {"RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE",
                                                 "GROUP_RANK",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "CHORUS_STORE_ADDR",
                                                 "CHORUS_LAUNCHER",
                                                 "CHORUS_RESTART_COUNT",
                                                 "CHORUS_RUN_ID",
                                                 "TORCHELASTIC_RESTART_COUNT",
                                                 "TORCHELASTIC_RUN_ID",
                                                 "OMPI_COMM_WORLD_RANK",
                                                 "OMPI_COMM_WORLD_SIZE",
                                                 "PMI_RANK",
                                                 "PMI_SIZE",
                                                 "SLURM_PROCID",
                                                 "SLURM_NTASKS"};
  return kVars;
}

Process start(const std::vector<std::string>& argv, const std::vector<std::string>& set,
              const std::vector<std::string>& unset) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool drop = false;
    for (const auto& u : unset) {
      drop = drop || u == name;
    }
    for (const auto& s : set) {
      drop = drop || s.substr(0, s.find('=')) == name;
    }
    if (!drop) {
      env.push_back(entry);
    }
  }
  env.insert(env.end(), set.begin(), set.end());
  std::vector<char*> envp;
  for (auto& e : env) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) {
    cargv.push_back(a.data());
  }
  cargv.push_back(nullptr);

  int pipefd[2];
  REQUIRE(::pipe2(pipefd, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(cargv[0], cargv.data(), envp.data());
    std::fprintf(stderr, "exec %s failed: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  Process p;
  p.pid = pid;
  p.out_fd = pipefd[0];
  return p;
}

bool read_until(Process& p, const std::string& needle, int times, Seconds timeout) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  while (count(p.output, needle) < times) {
    if (Clock::now() >= until || p.out_fd < 0) {
      return count(p.output, needle) >= times;
    }
    read_some(p, std::min(ms_left(until), 200));
  }
  return true;
}

bool finish(Process& p, Seconds timeout) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  while (!p.reaped) {
    if (p.out_fd >= 0) {
      read_some(p, std::min(ms_left(until), 100));
    } else {
      ::poll(nullptr, 0, std::min(ms_left(until), 20));  // output closed: wait for the exit
    }
    if (::waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
      p.reaped = true;
      break;
    }
    if (Clock::now() >= until) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &p.status, 0);
      p.reaped = true;
      while (read_some(p, 100) == 1) {
      }
      return false;
    }
  }
  // What is still in the pipe; a leftover grandchild may hold it open, so never wait for EOF.
  while (read_some(p, 100) == 1) {
  }
  return true;
}

Process run(const std::vector<std::string>& argv, Seconds timeout,
            const std::vector<std::string>& set, const std::vector<std::string>& unset) {
  Process p = start(argv, set, unset);
  const bool ended = finish(p, timeout);
  INFO("output:\n" << p.output);
  REQUIRE(ended);
  return p;
}

int shell_status(const Process& p) {
  if (WIFEXITED(p.status)) {
    return WEXITSTATUS(p.status);
  }
  if (WIFSIGNALED(p.status)) {
    return 128 + WTERMSIG(p.status);
  }
  return -1;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

std::string binary(const char* env_name) {
  const char* path = std::getenv(env_name);
  INFO("meson passes " << env_name << " to this test");
  REQUIRE(path != nullptr);
  return path;
}

bool gone(pid_t pid) {
  if (::kill(pid, 0) == 0) {
    // Exists; a zombie still counts as not gone (nobody reaped it).
    return false;
  }
  return errno == ESRCH;
}

}  // namespace launcher_test
