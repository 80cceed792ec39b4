// SPDX-License-Identifier: BSD-3-Clause
// store_attack: runs one hostile-client attack (docs/protocol.md, "Limits") against a
// chorus-store process it starts on 127.0.0.1 with default options, and reports the server's
// peak RSS (VmHWM) and a good client's ping latency (max and median of pings sent every 50 ms
// while the attack connections are open). Loopback only; every loop is bounded.
//
//   store_attack CHORUS_STORE_EXE ATTACK [SECONDS]
//   ATTACK: frames | gets | multiget | keys | idle | fill
// Output: one line "attack=... rss_before_attack_mib=... peak_rss_mib=... ping_max_ms=...
// ping_p50_ms=... pings=... failed=...". Public API plus raw sockets (the wire format is written
// out by hand, as a stranger would).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

namespace {

using Buf = std::vector<std::uint8_t>;

void put32(Buf& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put64(Buf& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_str(Buf& b, const std::string& s) {
  put32(b, static_cast<std::uint32_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}
Buf hello() { return Buf{'C', 'H', 'S', 'T', 1, 0, 0, 0}; }
// Appends a frame: u32 length, u8 op, u32 id, body.
void frame(Buf& out, std::uint8_t op, std::uint32_t id, const Buf& body) {
  put32(out, static_cast<std::uint32_t>(5 + body.size()));
  out.push_back(op);
  put32(out, id);
  out.insert(out.end(), body.begin(), body.end());
}

int connect_lo(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}
void send_all(int fd, const Buf& b) {
  std::size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed it: fine for an attacker
    off += static_cast<std::size_t>(n);
  }
}

std::size_t status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string f = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(f, 0) == 0) return std::stoul(line.substr(f.size()));
  }
  return 0;
}

struct ServerProc {
  pid_t pid = -1;
  std::uint16_t port = 0;
};

ServerProc start_server(const char* exe) {
  int p[2];
  if (::pipe(p) != 0) std::exit(2);
  ServerProc s;
  s.pid = ::fork();
  if (s.pid == 0) {
    ::dup2(p[1], 1);
    ::close(p[0]);
    ::execl(exe, exe, "--host", "127.0.0.1", "--port", "0", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(p[1]);
  std::string line;
  char c;
  pollfd pf{p[0], POLLIN, 0};
  while (::poll(&pf, 1, 30'000) == 1 && ::read(p[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(p[0]);
  const auto colon = line.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "store_attack: %s did not report its port\n", exe);
    ::kill(s.pid, SIGKILL);
    std::exit(2);
  }
  s.port = static_cast<std::uint16_t>(std::atoi(line.c_str() + colon + 1));
  return s;
}

chorus::TcpStore client(std::uint16_t port, double timeout_s) {
  chorus::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = chorus::Duration(static_cast<long long>(timeout_s * 1000));
  o.counts_as_client = false;
  return chorus::TcpStore(o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: store_attack CHORUS_STORE_EXE frames|gets|multiget|keys|idle|fill [SECONDS]\n");
    return 2;
  }
  const std::string attack = argv[2];
  const double seconds = argc > 3 ? std::atof(argv[3]) : 3.0;
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  const ServerProc server = start_server(argv[1]);
  std::vector<int> fds;
  constexpr std::size_t kBig = 8u << 20;  // the default max value
  try {
    // Setup with a well-behaved client.
    {
      auto setup = client(server.port, 60);
      if (attack == "gets" || attack == "multiget") {
        setup.set("big", chorus::Bytes(kBig - 1024, 7));
      } else if (attack == "keys") {
        std::vector<std::string> keys;
        std::vector<chorus::Bytes> values;
        for (int i = 0; i < 300000; ++i) {
          keys.push_back("job/rank/address/" + std::to_string(i));
          values.push_back(chorus::Bytes{1});
          if (keys.size() == 20000) {
            setup.multi_set(keys, values);
            keys.clear();
            values.clear();
          }
        }
      }
    }
    const std::size_t before_kib = status_kib(server.pid, "VmRSS");
    // The attack: connections that are never read.
    if (attack == "frames") {
      for (int i = 0; i < 500; ++i) {
        const int fd = connect_lo(server.port);
        if (fd < 0) break;
        fds.push_back(fd);
        Buf b = hello();
        put32(b, static_cast<std::uint32_t>(kBig + 1024));  // announces ~8 MiB, sends nothing
        send_all(fd, b);
      }
    } else if (attack == "gets") {
      for (int c = 0; c < 8; ++c) {
        const int fd = connect_lo(server.port);
        if (fd < 0) break;
        fds.push_back(fd);
        Buf b = hello();
        for (std::uint32_t i = 0; i < 60; ++i) {
          Buf body;
          put64(body, 0);
          put_str(body, "big");
          frame(b, 2, i + 1, body);
        }
        send_all(fd, b);
      }
    } else if (attack == "multiget") {
      for (int c = 0; c < 8; ++c) {
        const int fd = connect_lo(server.port);
        if (fd < 0) break;
        fds.push_back(fd);
        Buf b = hello();
        Buf body;
        put64(body, 0);
        put32(body, 60);
        for (int k = 0; k < 60; ++k) put_str(body, "big");
        frame(b, 9, 1, body);
        send_all(fd, b);
      }
    } else if (attack == "keys") {
      for (int c = 0; c < 4; ++c) {
        const int fd = connect_lo(server.port);
        if (fd < 0) break;
        fds.push_back(fd);
        Buf b = hello();
        for (std::uint32_t i = 0; i < 50; ++i) frame(b, 12, i + 1, {});
        send_all(fd, b);
      }
    } else if (attack == "fill") {
      // A runaway client storing 8 MiB values under new keys until the server refuses (its
      // max_stored_bytes); 4 GiB if nothing stopped it.
      auto filler = client(server.port, 60);
      int stored = 0;
      for (; stored < 512; ++stored) {
        try {
          filler.set("fill/" + std::to_string(stored), chorus::Bytes(kBig - 1024, 5));
        } catch (const chorus::StoreError& e) {
          std::printf("fill: refused after %d values of 8 MiB: %.200s\n", stored, e.what());
          break;
        }
      }
    } else if (attack == "idle") {
      const std::size_t n = rl.rlim_cur > 600 ? std::min<std::size_t>(20000, rl.rlim_cur - 500) : 0;
      for (std::size_t i = 0; i < n; ++i) {
        const int fd = connect_lo(server.port);
        if (fd < 0) break;
        fds.push_back(fd);
        send_all(fd, hello());
      }
    } else {
      std::fprintf(stderr, "store_attack: unknown attack '%s'\n", attack.c_str());
      ::kill(server.pid, SIGKILL);
      return 2;
    }
    // The good client: a fresh connection, pings every 50 ms while the attack is held open.
    std::vector<double> ms;
    int failed = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::string first_error;
    while (std::chrono::steady_clock::now() < until) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        auto good = client(server.port, 30);
        good.ping();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      } catch (const std::exception& e) {
        ++failed;
        if (first_error.empty()) first_error = e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // pacing, not synchronization
    }
    std::sort(ms.begin(), ms.end());
    const std::size_t peak = status_kib(server.pid, "VmHWM");
    std::printf(
        "attack=%s conns=%zu rss_before_attack_mib=%zu peak_rss_mib=%zu ping_max_ms=%.1f ping_p50_ms=%.1f pings=%zu failed=%d%s%s\n",
        attack.c_str(), fds.size(), before_kib / 1024, peak / 1024, ms.empty() ? -1.0 : ms.back(),
        ms.empty() ? -1.0 : ms[ms.size() / 2], ms.size(), failed,
        first_error.empty() ? "" : " first_error=", first_error.substr(0, 160).c_str());
  } catch (const std::exception& e) {
    std::printf("attack=%s setup failed: %s\n", attack.c_str(), e.what());
  }
  for (int fd : fds) ::close(fd);
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  return 0;
}
