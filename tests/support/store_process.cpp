// SPDX-License-Identifier: BSD-3-Clause
// StoreServerProcess: a TcpStore server in a forked process, for multi-process tests.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <chorus/tcp_store.hpp>

#include "support/multiproc.hpp"

namespace chorus::test {

StoreServerProcess::StoreServerProcess() : StoreServerProcess(TcpStoreServerOptions{}) {}

StoreServerProcess::StoreServerProcess(const TcpStoreServerOptions& options) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  if (pid_ < 0) {
    throw std::runtime_error("fork failed");
  }
  if (pid_ == 0) {
    ::close(fds[0]);
    alarm(static_cast<unsigned>(600 * test_time_scale()));  // never outlive a broken parent long
    int code = 0;
    try {
      TcpStoreServerOptions o = options;
      o.host = "127.0.0.1";
      o.port = 0;
      TcpStoreServer server(o);
      const std::uint16_t port = server.port();
      (void)!::write(fds[1], &port, sizeof(port));
      ::close(fds[1]);
      // Serve until killed by the parent.
      for (;;) {
        pause();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store server process failed: %s\n", e.what());
      code = 1;
    }
    _exit(code);
  }
  ::close(fds[1]);
  watchdog_kills(pid_);
  std::uint16_t port = 0;
  pollfd pfd{fds[0], POLLIN, 0};
  if (::poll(&pfd, 1, 30'000) == 1 && ::read(fds[0], &port, sizeof(port)) == sizeof(port)) {
    port_ = port;
  }
  ::close(fds[0]);
  if (port_ == 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    watchdog_forgets(pid_);
    throw std::runtime_error("the store server process did not report its port within 30 s");
  }
}

StoreServerProcess::~StoreServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    watchdog_forgets(pid_);
  }
}

}  // namespace chorus::test
