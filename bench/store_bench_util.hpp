// SPDX-License-Identifier: BSD-3-Clause
// What the store benchmarks (store_perf, bootstrap_perf) share: a store server in a process of
// its own, reading a pipe with a timeout, the open-file limit, /proc figures and medians.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::bench {

// "1,64,1024" -> {1, 64, 1024}.
std::vector<int> parse_list(const char* text);

// Reads exactly len bytes, waiting at most timeout_ms for each part; false on EOF or timeout.
bool read_full(int fd, void* data, std::size_t len, int timeout_ms);

// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft limit afterwards.
std::uint64_t raise_open_file_limit();

// kB of a /proc/<pid>/status field ("VmHWM", "VmRSS"), or -1.
long proc_status_kib(pid_t pid, const std::string& field);

double median(std::vector<double> v);

// A TcpStoreServer on 127.0.0.1 (port 0) in a forked process, which dies with this one. Fork
// it before starting threads. max_connections 0: the server's default.
class ServerProcess {
 public:
  explicit ServerProcess(std::size_t max_connections = 0);
  ~ServerProcess();  // SIGKILLs and reaps it
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const noexcept { return pid_; }
  std::uint16_t port() const noexcept { return port_; }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace chorus::bench
