// SPDX-License-Identifier: BSD-3-Clause
// chorus-store as a user runs it: serve on port 0 (the first stdout line names the port), then
// the redis-cli-like client commands and their exit statuses.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "store/store_test_util.hpp"

using namespace std::chrono_literals;

namespace {

std::string exe() {
  const char* path = std::getenv("CHORUS_STORE_EXE");
  REQUIRE(path != nullptr);
  return path;
}

// A spawned chorus-store. The pid is signalled only while the child is unreaped: once
// waitpid() has collected it, the pid is cleared, because the kernel may already have given
// that number to another process.
struct Proc {
  pid_t pid = -1;
  int out = -1;
  int err = -1;
  int status = 0;  // valid once reaped

  // SIGKILL if still ours, then reap; returns the wait status.
  int kill_and_reap() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      reap(true);
    }
    return status;
  }
  // waitpid(); true (and pid cleared) once the child has been collected.
  bool reap(bool block) {
    if (pid <= 0) {
      return true;
    }
    pid_t got = 0;
    do {
      got = ::waitpid(pid, &status, block ? 0 : WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got == pid || got < 0) {
      pid = -1;
      return true;
    }
    return false;
  }
  void close_pipes() {
    if (out >= 0) ::close(out);
    if (err >= 0) ::close(err);
    out = err = -1;
  }
};

Proc spawn(const std::vector<std::string>& args) {
  int out[2];
  int err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    std::vector<char*> argv;
    std::string path = exe();
    argv.push_back(path.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return {pid, out[0], err[0]};
}

struct Result {
  int status = -1;  // exit code, or -1 if killed at the bound
  std::string out;
  std::string err;
};

// Runs chorus-store with args, bounded by `bound`.
Result run(const std::vector<std::string>& args, chorus::Duration bound = 20s) {
  Proc p = spawn(args);
  Result r;
  const chorus::Deadline d = chorus::Deadline::after(bound);
  int open = 2;
  while (open > 0 && !d.expired()) {
    pollfd pfds[2] = {{p.out, POLLIN, 0}, {p.err, POLLIN, 0}};
    if (::poll(pfds, 2, 100) <= 0) {
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (pfds[i].fd < 0 || pfds[i].revents == 0) {
        continue;
      }
      char buf[4096];
      const ssize_t n = ::read(pfds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(i == 0 ? p.out : p.err);
        (i == 0 ? p.out : p.err) = -1;
        --open;
      }
    }
  }
  // Both pipes closed: the child is exiting, collect it. Still open at the bound: kill it.
  const int status = open > 0 ? p.kill_and_reap() : (p.reap(true), p.status);
  p.close_pipes();
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A chorus-store server on 127.0.0.1, port 0; killed on destruction.
struct Server {
  explicit Server(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    p = spawn(args);
    std::string line;
    const chorus::Deadline d = chorus::Deadline::after(20s);
    while (line.find('\n') == std::string::npos && !d.expired()) {
      pollfd pfd{p.out, POLLIN, 0};
      if (::poll(&pfd, 1, 100) == 1) {
        char buf[256];
        const ssize_t n = ::read(p.out, buf, sizeof(buf));
        if (n <= 0) {
          break;
        }
        line.append(buf, static_cast<std::size_t>(n));
      }
    }
    first_line = line.substr(0, line.find('\n'));
    const auto colon = first_line.rfind(':');
    if (first_line.rfind("chorus-store listening on 127.0.0.1:", 0) == 0 &&
        colon != std::string::npos) {
      port = first_line.substr(colon + 1);
    }
  }
  ~Server() {
    // SIGTERM, give it 10 s to exit cleanly, then SIGKILL only if it is still unreaped.
    if (p.pid > 0) {
      ::kill(p.pid, SIGTERM);
    }
    const chorus::Deadline d = chorus::Deadline::after(10s);
    while (!p.reap(false) && !d.expired()) {
      ::usleep(10000);
    }
    p.kill_and_reap();
    p.close_pipes();
  }
  std::string address() const { return "127.0.0.1:" + port; }
  Proc p;
  std::string first_line;
  std::string port;
};

}  // namespace

TEST_CASE("chorus-store --help", "[store][cli]") {
  auto r = run({"--help"});
  REQUIRE(r.status == 0);
  REQUIRE(r.out.find("--connect") != std::string::npos);
  REQUIRE(run({"--bogus"}).status == 2);
}

TEST_CASE("chorus-store serves on port 0 and answers the client commands", "[store][cli]") {
  Server server;
  INFO(server.first_line);
  REQUIRE_FALSE(server.port.empty());
  const std::string a = server.address();
  REQUIRE(run({"--connect", a, "ping"}).status == 0);
  REQUIRE(run({"--connect", a, "set", "greeting", "hello world"}).status == 0);
  auto get = run({"--connect", a, "get", "greeting"});
  REQUIRE(get.status == 0);
  REQUIRE(get.out == "hello world\n");
  auto add = run({"--connect", a, "add", "n", "5"});
  REQUIRE(add.out == "5\n");
  REQUIRE(run({"--connect", a, "add", "n", "-2"}).out == "3\n");
  REQUIRE(run({"--connect", a, "check", "greeting", "n"}).out == "true\n");
  auto missing = run({"--connect", a, "check", "greeting", "nope"});
  REQUIRE(missing.status == 1);
  REQUIRE(missing.out == "false\n");
  REQUIRE(run({"--connect", a, "keys"}).out == "greeting\nn\n");
  REQUIRE(run({"--connect", a, "num_keys"}).out == "2\n");
  REQUIRE(run({"--connect", a, "wait", "greeting", "n"}).status == 0);

  const auto start = chorus::Clock::now();
  auto timed_out = run({"--connect", a, "--timeout", "0.3", "wait", "greeting", "never"});
  REQUIRE(timed_out.status == 3);
  REQUIRE(timed_out.err.find("never") != std::string::npos);
  REQUIRE(chorus::test::since(start) < 300ms + chorus::test::kSlack);
  auto get_missing = run({"--connect", a, "--timeout", "0.2", "get", "never"});
  REQUIRE(get_missing.status == 3);

  auto not_integer = run({"--connect", a, "add", "greeting", "1"});
  REQUIRE(not_integer.status == 4);
  REQUIRE(not_integer.err.find("not an integer") != std::string::npos);
  REQUIRE(run({"--connect", a, "delete", "greeting"}).out == "true\n");

  // add takes any int64; out-of-range numbers are usage errors, never clamped or wrapped.
  REQUIRE(run({"--connect", a, "add", "huge", "9223372036854775807"}).out ==
          "9223372036854775807\n");
  auto overflow = run({"--connect", a, "add", "huge", "1"});
  REQUIRE(overflow.status == 4);
  REQUIRE(overflow.err.find("int64") != std::string::npos);
  auto out_of_range = run({"--connect", a, "add", "m", "9223372036854775808"});
  REQUIRE(out_of_range.status == 2);
  REQUIRE(out_of_range.err.find("9223372036854775808") != std::string::npos);
  REQUIRE(run({"--connect", a, "add", "m", "-99999999999999999999"}).status == 2);
  REQUIRE(run({"--connect", a, "check", "m"}).out == "false\n");
}

TEST_CASE("chorus-store: malformed numeric flags are refused, not misread", "[store][cli]") {
  for (const char* bad : {"abc", "-1", "5G", "", "0", "1e3", "99999999999999999999"}) {
    auto r = run({"--port", "0", "--max-value-bytes", bad});
    INFO("--max-value-bytes " << bad << ": " << r.err);
    REQUIRE(r.status == 2);
    REQUIRE(r.err.find("--max-value-bytes expects an integer") != std::string::npos);
  }
  for (const char* bad : {"inf", "nan", "1e30", "-1", "0", "abc", "10s", "2000000"}) {
    auto r = run({"--connect", "127.0.0.1:1", "--timeout", bad, "ping"});
    INFO("--timeout " << bad << ": " << r.err);
    REQUIRE(r.status == 2);
    REQUIRE(r.err.find("--timeout expects seconds") != std::string::npos);
  }
  for (const char* flag : {"--max-buffered-bytes", "--max-unread-reply-bytes", "--max-reply-bytes",
                           "--max-connections"}) {
    auto r = run({"--port", "0", flag, "4K"});
    INFO(flag << ": " << r.err);
    REQUIRE(r.status == 2);
  }
  REQUIRE(run({"--port", "0", "--hello-timeout", "inf"}).status == 2);
}

TEST_CASE("chorus-store: failures exit non-zero with the reason", "[store][cli]") {
  {
    Server server;
    REQUIRE_FALSE(server.port.empty());
    // Address in use: names the port.
    auto busy = run({"--host", "127.0.0.1", "--port", server.port});
    REQUIRE(busy.status == 4);
    REQUIRE(busy.err.find("in use") != std::string::npos);
    REQUIRE(busy.err.find(server.port) != std::string::npos);
  }
  // Nobody listening: the error names the address.
  auto refused = run({"--connect", "127.0.0.1:1", "--timeout", "0.3", "ping"});
  REQUIRE(refused.status == 3);
  REQUIRE(refused.err.find("127.0.0.1:1") != std::string::npos);
  REQUIRE(run({"--connect", "nonsense", "ping"}).status == 2);
}

TEST_CASE("chorus-store --token-file: the server requires the token, clients prove it",
          "[store][cli]") {
  char tmpl[] = "/tmp/chorus_token_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  const std::string token = "cli-test-token-0123456789abcdef\n";  // a trailing newline is ignored
  REQUIRE(::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size()));
  ::close(fd);
  Server server({"--token-file", tmpl});
  INFO(server.first_line);
  REQUIRE_FALSE(server.port.empty());
  const std::string a = server.address();
  REQUIRE(run({"--token-file", tmpl, "--connect", a, "set", "k", "v"}).status == 0);
  REQUIRE(run({"--token-file", tmpl, "--connect", a, "get", "k"}).out == "v\n");
  auto stranger = run({"--connect", a, "get", "k"});
  CHECK(stranger.status == 4);
  CHECK(stranger.err.find("requires a job token") != std::string::npos);
  CHECK(stranger.out.empty());
  CHECK(run({"--token-file", "/nonexistent/token", "--connect", a, "get", "k"}).status == 2);
  ::unlink(tmpl);
}
