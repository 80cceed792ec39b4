// SPDX-License-Identifier: BSD-3-Clause
#include "store_bench_util.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <chorus/tcp_store.hpp>

namespace chorus::bench {

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  std::string s(text);
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t comma = s.find(',', pos);
    out.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
    pos = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

bool read_full(int fd, void* data, std::size_t len, int timeout_ms) {
  auto* p = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < len) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) != 1) {
      return false;
    }
    const ssize_t n = ::read(fd, p + got, len - got);
    if (n <= 0) {
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

std::uint64_t raise_open_file_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

long proc_status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::atol(line.c_str() + field.size() + 1);
    }
  }
  return -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

ServerProcess::ServerProcess(std::size_t max_connections) {
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    raise_open_file_limit();
    TcpStoreServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.max_connections = max_connections;
    TcpStoreServer server(so);
    const std::uint16_t p = server.port();
    (void)!::write(fds[1], &p, sizeof(p));
    ::close(fds[1]);
    for (;;) {
      ::pause();
    }
  }
  ::close(fds[1]);
  if (!read_full(fds[0], &port_, sizeof(port_), 30000)) {
    std::fprintf(stderr, "the store server process did not start\n");
    std::exit(1);
  }
  ::close(fds[0]);
}

ServerProcess::~ServerProcess() {
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace chorus::bench
