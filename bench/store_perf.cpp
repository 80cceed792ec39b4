// SPDX-License-Identifier: BSD-3-Clause
// store_perf: TcpStore throughput (set/get/add ops/s at 1, 64 and 1024 concurrent clients) and
// bootstrap time (N simulated ranks: set address, add to a counter, wait for the last one,
// multi_get every address) for N = 256, 1024, 4096. Public API only.
//
// The server runs in its own process; clients are threads spread over up to 8 forked processes,
// each with its own connection. All clients are armed first and released at once through a
// pipe; time runs from the release to the last client's finish (CLOCK_MONOTONIC is shared by
// processes). Each throughput cell is the median of -r runs.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Config {
  long ops = 50000;  // per throughput cell, split over the clients
  int repeats = 3;
  std::vector<int> clients = {1, 64, 1024};
  std::vector<int> bootstrap = {256, 1024, 4096};
  int max_procs = 8;
};

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

std::unique_ptr<chorus::TcpStore> connect(std::uint16_t port) {
  chorus::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 120s;
  return std::make_unique<chorus::TcpStore>(o);
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

// The server, forked before any thread exists; it reports its port through a pipe.
struct ServerProcess {
  pid_t pid = -1;
  std::uint16_t port = 0;
  ServerProcess() {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("pipe");
      std::exit(1);
    }
    pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      chorus::TcpStoreServer server({.host = "127.0.0.1", .port = 0});
      const std::uint16_t p = server.port();
      (void)!::write(fds[1], &p, sizeof(p));
      ::close(fds[1]);
      for (;;) {
        ::pause();
      }
    }
    ::close(fds[1]);
    if (!read_full(fds[0], &port, sizeof(port), 30000)) {
      std::fprintf(stderr, "store_perf: the server process did not start\n");
      std::exit(1);
    }
    ::close(fds[0]);
  }
  ~ServerProcess() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// Runs `clients` clients as threads over up to max_procs processes. setup(i) runs before the
// start (untimed), work(i) after the common release (timed). Returns seconds from the release to
// the last finish, or a negative value if a client failed.
double run_clients(int clients, int max_procs,
                   const std::function<void(int, std::unique_ptr<chorus::TcpStore>&)>& setup,
                   const std::function<void(int, std::unique_ptr<chorus::TcpStore>&)>& work) {
  const int procs = std::min(clients, max_procs);
  int armed[2], release[2], done[2];
  if (::pipe(armed) != 0 || ::pipe(release) != 0 || ::pipe(done) != 0) {
    std::perror("pipe");
    return -1;
  }
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int p = 0; p < procs; ++p) {
    const int first = clients * p / procs;
    const int last = clients * (p + 1) / procs;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(armed[0]);
      ::close(release[1]);
      ::close(done[0]);
      std::mutex mu;
      std::condition_variable cv;
      int ready = 0;
      bool go = false;
      std::atomic<int> failures{0};
      std::vector<std::thread> threads;
      for (int i = first; i < last; ++i) {
        threads.emplace_back([&, i] {
          std::unique_ptr<chorus::TcpStore> store;
          try {
            setup(i, store);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "client %d setup: %s\n", i, e.what());
            ++failures;
          }
          {
            std::unique_lock<std::mutex> lock(mu);
            ++ready;
            cv.notify_all();
            cv.wait(lock, [&] { return go; });
          }
          try {
            if (failures == 0) {
              work(i, store);
            }
          } catch (const std::exception& e) {
            std::fprintf(stderr, "client %d: %s\n", i, e.what());
            ++failures;
          }
        });
      }
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return ready == last - first; });
      }
      (void)!::write(armed[1], "a", 1);
      char b;
      if (!read_full(release[0], &b, 1, 600000)) {
        _exit(2);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        go = true;
      }
      cv.notify_all();
      for (auto& t : threads) {
        t.join();
      }
      const auto end = Clock::now().time_since_epoch().count();
      (void)!::write(done[1], &end, sizeof(end));
      std::fflush(stderr);
      _exit(failures == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(armed[1]);
  ::close(release[0]);
  ::close(done[1]);
  std::vector<char> buf(static_cast<std::size_t>(procs));
  bool ok = read_full(armed[0], buf.data(), buf.size(), 600000);
  const auto start = Clock::now();
  (void)!::write(release[1], buf.data(), buf.size());
  Clock::rep last_end = start.time_since_epoch().count();
  for (int p = 0; p < procs && ok; ++p) {
    Clock::rep end = 0;
    ok = read_full(done[0], &end, sizeof(end), 600000);
    last_end = std::max(last_end, end);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  ::close(armed[0]);
  ::close(release[1]);
  ::close(done[0]);
  if (!ok) {
    return -1;
  }
  return std::chrono::duration<double>(Clock::duration(last_end) - start.time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "store_perf: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-n" || a == "--ops") {
      cfg.ops = std::atol(next());
    } else if (a == "-r" || a == "--repeats") {
      cfg.repeats = std::max(1, std::atoi(next()));
    } else if (a == "-c" || a == "--clients") {
      cfg.clients = parse_list(next());
    } else if (a == "-b" || a == "--bootstrap") {
      cfg.bootstrap = parse_list(next());
    } else if (a == "-p" || a == "--procs") {
      cfg.max_procs = std::max(1, std::atoi(next()));
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: store_perf [-n OPS] [-r REPEATS] [-c 1,64,1024] [-b 256,1024,4096] [-p PROCS]\n"
          "  -n  operations per throughput cell, split over the clients (default 50000)\n"
          "  -r  runs per throughput cell; the median is printed (default 3)\n"
          "  -c  client counts for set/get/add throughput ('' or 0 to skip)\n"
          "  -b  rank counts for the bootstrap test ('' or 0 to skip)\n"
          "  -p  client processes (threads are spread over them; default 8)\n");
      return 0;
    } else {
      std::fprintf(stderr, "store_perf: unknown option %s (try --help)\n", a.c_str());
      return 2;
    }
  }
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ServerProcess server;
  std::printf(
      "# store_perf: TcpStore server in its own process on 127.0.0.1:%u; clients are threads "
      "in up to %d processes, one connection each\n",
      static_cast<unsigned>(server.port), cfg.max_procs);
  std::printf("# open file limit %llu; %u CPUs; values of 3 bytes (as redis-benchmark -d 3)\n",
              static_cast<unsigned long long>(rl.rlim_cur), std::thread::hardware_concurrency());

  bool failed = false;
  if (!cfg.clients.empty() && cfg.clients[0] > 0) {
    std::printf("#\n# throughput: median of %d runs, %ld ops per run split over the clients\n",
                cfg.repeats, cfg.ops);
    std::printf("# %-6s %8s %10s %12s %12s\n", "op", "clients", "ops", "time(ms)", "ops/s");
    for (const char* op : {"set", "get", "add"}) {
      for (int clients : cfg.clients) {
        const long per_client = std::max<long>(1, cfg.ops / clients);
        const long total = per_client * clients;
        const std::string o = op;
        std::vector<double> times;
        for (int r = 0; r < cfg.repeats; ++r) {
          const double t = run_clients(
              clients, cfg.max_procs,
              [&](int i, std::unique_ptr<chorus::TcpStore>& s) {
                s = connect(server.port);
                if (o == "get") {
                  s->set("k/" + std::to_string(i), std::string_view("xxx"));
                }
              },
              [&](int i, std::unique_ptr<chorus::TcpStore>& s) {
                const std::string key = "k/" + std::to_string(i);
                for (long n = 0; n < per_client; ++n) {
                  if (o == "set") {
                    s->set(key, std::string_view("xxx"));
                  } else if (o == "get") {
                    (void)s->get(key);
                  } else {
                    (void)s->add("counter", 1);
                  }
                }
              });
          if (t < 0) {
            failed = true;
            break;
          }
          times.push_back(t);
        }
        if (times.empty()) {
          std::printf("  %-6s %8d   FAILED\n", op, clients);
          continue;
        }
        const double t = median(times);
        std::printf("  %-6s %8d %10ld %12.1f %12.0f\n", op, clients, total, t * 1e3, total / t);
        std::fflush(stdout);
      }
    }
  }

  if (!cfg.bootstrap.empty() && cfg.bootstrap[0] > 0) {
    std::printf(
        "#\n# bootstrap: N ranks each connect, set its address, add to a counter, wait for "
        "the last one, multi_get every address\n");
    std::printf("# %8s %12s %14s %16s\n", "ranks", "time(ms)", "per rank(us)", "values fetched");
    int round = 0;
    for (int n : cfg.bootstrap) {
      const std::string prefix = "boot" + std::to_string(round++) + "/";
      std::vector<std::string> keys;
      for (int r = 0; r < n; ++r) {
        keys.push_back(prefix + "addr/" + std::to_string(r));
      }
      const double t = run_clients(
          n, cfg.max_procs, [](int, std::unique_ptr<chorus::TcpStore>&) {},
          [&](int rank, std::unique_ptr<chorus::TcpStore>& s) {
            s = connect(server.port);
            s->set(keys[static_cast<std::size_t>(rank)],
                   std::string_view("10.0.0." + std::to_string(rank % 250) + ":" +
                                    std::to_string(20000 + rank)));
            if (s->add(prefix + "count", 1) == n) {
              s->set(prefix + "done", std::string_view("1"));
            }
            s->wait({prefix + "done"});
            const auto values = s->multi_get(keys);
            if (values.size() != keys.size()) {
              throw std::runtime_error("multi_get returned the wrong number of values");
            }
          });
      if (t < 0) {
        std::printf("  %8d   FAILED\n", n);
        failed = true;
        continue;
      }
      std::printf("  %8d %12.1f %14.1f %16lld\n", n, t * 1e3, t * 1e6 / n,
                  static_cast<long long>(n) * n);
      std::fflush(stdout);
    }
  }
  return failed ? 1 : 0;
}
