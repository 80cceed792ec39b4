// SPDX-License-Identifier: BSD-3-Clause
// store_perf: the TcpStore server next to redis, and the TcpStore client API.
//
// 1. Server throughput, chorus vs redis (-s, -P): set/get/add ops/s at 1, 64, 1024 and 4096
//    connections, one request in flight per connection and pipelined batches of -P requests.
//    Both servers are driven by the same generator (store_load.cpp: one epoll thread, raw
//    protocol, like redis-benchmark), and redis-benchmark itself runs against redis-server in the
//    same run as a reference. add = chorus add("counter", 1) = redis INCR counter. Also the
//    CPU time each server spent per operation. redis is optional (--redis off, or not
//    installed: chorus numbers only).
// 2. Server memory with many connections (--rss-clients): RSS with N idle connections, then
//    after each did one set.
// 3. TcpStore API throughput (-c): set/get/add through chorus::TcpStore, clients are threads in
//    up to 8 forked processes, each with its own connection.
// 4. Bootstrap time (-b): N simulated ranks set an address, add to a counter, wait for the last
//    one, multi_get every address.
//
// The servers run in their own processes. Each throughput cell is the median of -r runs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
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

#include "store_bench_util.hpp"
#include "store_load.hpp"

namespace {

using namespace chorus::bench;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Config {
  long ops = 50000;  // per throughput cell, split over the clients
  int repeats = 3;
  std::vector<int> clients = {1, 64, 1024};
  std::vector<int> bootstrap = {256, 1024, 4096};
  int max_procs = 8;
  std::vector<int> server_clients = {1, 64, 1024, 4096};
  long server_ops = 200000;             // per cell, one request in flight per connection
  long server_ops_pipelined = 1000000;  // per cell with -P
  std::vector<int> depths = {1, 16};    // requests per batch; 1 = one in flight per connection
  int gen_threads = 1;
  std::string redis = "auto";  // auto: redis-server / redis-benchmark from PATH; off; or a path
  int rss_clients = 16384;
};

std::unique_ptr<chorus::TcpStore> connect(std::uint16_t port) {
  chorus::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 120s;
  return std::make_unique<chorus::TcpStore>(o);
}

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

// An executable named `name` on PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= p.size()) {
    const std::size_t colon = std::min(p.find(':', pos), p.size());
    const std::string candidate = p.substr(pos, colon - pos) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    pos = colon + 1;
  }
  return "";
}

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("store_perf: picking a port");
    std::exit(1);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// redis-server on 127.0.0.1 without persistence, killed with this process.
struct RedisProcess {
  pid_t pid = -1;
  std::uint16_t port = 0;
  RedisProcess(const std::string& binary, int max_clients) {
    port = free_loopback_port();
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      const std::string port_text = std::to_string(port);
      const std::string clients_text = std::to_string(max_clients);
      ::execl(binary.c_str(), binary.c_str(), "--port", port_text.c_str(), "--bind", "127.0.0.1",
              "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
              "--maxclients", clients_text.c_str(), "--tcp-backlog", "4096", "--loglevel",
              "warning", static_cast<char*>(nullptr));
      _exit(127);
    }
    // Ready once it accepts a connection.
    for (int i = 0; i < 500; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
      ::close(fd);
      if (up) {
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
    std::fprintf(stderr, "store_perf: %s did not start listening on port %u\n", binary.c_str(),
                 static_cast<unsigned>(port));
    std::exit(1);
  }
  ~RedisProcess() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// User + system CPU seconds of a process (all its threads) so far.
double process_cpu_seconds(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) {
    return 0;
  }
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces
  if (p == nullptr) {
    return 0;
  }
  unsigned long utime = 0, stime = 0;
  // Fields after ")": state(3) ... utime(14) stime(15).
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) !=
      2) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One throughput cell through store_load: median ops/s and median server CPU us per op.
struct Cell {
  bool ok = false;
  double ops_per_s = 0;
  double server_us_per_op = 0;
  double client_us_per_op = 0;
};

Cell load_cell(store_load::Proto proto, store_load::Op op, std::uint16_t port, pid_t server,
               int clients, int pipeline, long ops, int threads, int repeats) {
  std::vector<double> rates, server_us, client_us;
  for (int r = 0; r < repeats; ++r) {
    store_load::Spec spec;
    spec.proto = proto;
    spec.op = op;
    spec.port = port;
    spec.connections = clients;
    spec.ops = ops;
    spec.pipeline = pipeline;
    spec.threads = threads;
    double cpu0 = 0, cpu1 = 0;
    spec.at_start = [&] { cpu0 = process_cpu_seconds(server); };
    spec.at_end = [&] { cpu1 = process_cpu_seconds(server); };
    const store_load::Result res = store_load::run(spec);
    const double cpu = cpu1 - cpu0;
    if (!res.ok) {
      std::fprintf(stderr, "store_perf: %s %s %d clients: %s\n",
                   proto == store_load::Proto::chorus ? "chorus" : "redis", store_load::op_name(op),
                   clients, res.error.c_str());
      return {};
    }
    rates.push_back(static_cast<double>(res.ops) / res.seconds);
    server_us.push_back(cpu * 1e6 / static_cast<double>(res.ops));
    client_us.push_back(res.cpu_seconds * 1e6 / static_cast<double>(res.ops));
  }
  return {true, median(rates), median(server_us), median(client_us)};
}

// redis-benchmark -t set,get,incr at one client count: median ops/s per test.
struct BenchmarkRates {
  bool ok = false;
  double set = 0, get = 0, incr = 0;
};

BenchmarkRates redis_benchmark(const std::string& binary, std::uint16_t port, int clients,
                               int pipeline, long ops, int repeats) {
  std::vector<double> set, get, incr;
  for (int r = 0; r < repeats; ++r) {
    const std::string cmd = binary + " -h 127.0.0.1 -p " + std::to_string(port) + " -c " +
                            std::to_string(clients) + " -n " + std::to_string(ops) + " -P " +
                            std::to_string(pipeline) + " -d 3 -t set,get,incr --csv 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) {
      return {};
    }
    char line[512];
    while (std::fgets(line, sizeof(line), p) != nullptr) {
      char test[32] = {0};
      double rps = 0;
      if (std::sscanf(line, "\"%31[^\"]\",\"%lf\"", test, &rps) == 2) {
        const std::string t = test;
        (t == "SET" ? set : t == "GET" ? get : incr).push_back(rps);
      }
    }
    ::pclose(p);
  }
  if (set.empty() || get.empty() || incr.empty()) {
    return {};
  }
  return {true, median(set), median(get), median(incr)};
}

void print_rss(const char* who, const char* state, int clients, pid_t pid) {
  const store_load::Rss m = store_load::read_rss(pid);
  std::printf("  %-7s %-34s %8d %10.1f %10.1f %10.2f\n", who, state, clients, m.rss_kib / 1024.0,
              m.hwm_kib / 1024.0, clients > 0 ? m.rss_kib / static_cast<double>(clients) : 0.0);
  std::fflush(stdout);
}

// RSS of a server with `clients` idle connections, then after each did one set.
bool measure_rss(const char* who, store_load::Proto proto, std::uint16_t port, pid_t pid,
                 int clients) {
  print_rss(who, "before connecting", 0, pid);
  store_load::IdleClients idle(proto, port, clients);
  if (!idle.error().empty()) {
    std::printf("  %-7s FAILED after %d connections: %s\n", who, idle.connected(),
                idle.error().c_str());
    return false;
  }
  std::this_thread::sleep_for(200ms);  // let the server accept and read the last handshakes
  print_rss(who, "connected, idle", clients, pid);
  if (!idle.act()) {
    std::printf("  %-7s FAILED: %s\n", who, idle.error().c_str());
    return false;
  }
  print_rss(who, "after one set on each", clients, pid);
  return true;
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
    } else if (a == "-s" || a == "--server-clients") {
      cfg.server_clients = parse_list(next());
    } else if (a == "--server-ops") {
      cfg.server_ops = std::atol(next());
    } else if (a == "--pipelined-ops") {
      cfg.server_ops_pipelined = std::atol(next());
    } else if (a == "-P" || a == "--pipeline") {
      cfg.depths = parse_list(next());
    } else if (a == "-t" || a == "--gen-threads") {
      cfg.gen_threads = std::max(1, std::atoi(next()));
    } else if (a == "--redis") {
      cfg.redis = next();
    } else if (a == "--rss-clients") {
      cfg.rss_clients = std::atoi(next());
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: store_perf [-s 1,64,1024,4096] [-P 1,16] [--server-ops N] [--pipelined-ops N]\n"
          "                  [-t THREADS] [--redis auto|off|DIR] [--rss-clients N] [-r REPEATS]\n"
          "                  [-n OPS] [-c 1,64,1024] [-b 256,1024,4096] [-p PROCS]\n"
          "  -s  connection counts for the server comparison, chorus vs redis ('' or 0 to skip)\n"
          "  -P  requests per batch in the comparison: 1 = one in flight per connection, 16 = "
          "like\n      redis-benchmark -P 16 (default 1,16)\n"
          "  --server-ops     operations per comparison cell (default 200000)\n"
          "  --pipelined-ops  operations per pipelined comparison cell (default 1000000)\n"
          "  -t  generator threads in the comparison (default 1, like redis-benchmark)\n"
          "  --redis  auto: redis-server and redis-benchmark from PATH; off; or the directory "
          "holding them\n"
          "  --rss-clients  connections for the server memory test (default 16384; 0 skips)\n"
          "  -r  runs per throughput cell; the median is printed (default 3)\n"
          "  -n  operations per TcpStore API cell, split over the clients (default 50000)\n"
          "  -c  client counts for TcpStore API set/get/add throughput ('' or 0 to skip)\n"
          "  -b  rank counts for the bootstrap test ('' or 0 to skip)\n"
          "  -p  client processes for -c and -b (threads are spread over them; default 8)\n");
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
  std::string redis_server, redis_bench;
  if (cfg.redis != "off") {
    const std::string dir = cfg.redis == "auto" ? "" : cfg.redis + "/";
    redis_server = dir.empty() ? find_on_path("redis-server") : dir + "redis-server";
    redis_bench = dir.empty() ? find_on_path("redis-benchmark") : dir + "redis-benchmark";
    if (::access(redis_server.c_str(), X_OK) != 0) {
      redis_server.clear();
    }
    if (::access(redis_bench.c_str(), X_OK) != 0) {
      redis_bench.clear();
    }
  }
  std::printf("# store_perf: chorus TcpStore server (pid %d) in its own process on 127.0.0.1:%u\n",
              static_cast<int>(server.pid()), static_cast<unsigned>(server.port()));
  std::printf("# open file limit %llu; %u CPUs; values of 3 bytes (as redis-benchmark -d 3)\n",
              static_cast<unsigned long long>(rl.rlim_cur), std::thread::hardware_concurrency());
  std::unique_ptr<RedisProcess> redis;
  if (!redis_server.empty()) {
    redis = std::make_unique<RedisProcess>(redis_server, cfg.rss_clients + 1024);
    std::printf("# redis: %s (pid %d) on 127.0.0.1:%u, no persistence; redis-benchmark: %s\n",
                redis_server.c_str(), static_cast<int>(redis->pid),
                static_cast<unsigned>(redis->port),
                redis_bench.empty() ? "not found" : redis_bench.c_str());
  } else {
    std::printf("# redis: %s; only chorus numbers are printed\n",
                cfg.redis == "off" ? "off (--redis off)"
                                   : "redis-server not found (apt-get install redis-server "
                                     "redis-tools, or --redis DIR)");
  }

  bool failed = false;
  if (!cfg.server_clients.empty() && cfg.server_clients[0] > 0) {
    std::printf(
        "#\n# server throughput, ops/s (median of %d runs). chorus and redis columns: the same "
        "generator\n# (store_load: %d epoll thread(s), raw protocol, each connection sends a "
        "batch of P requests\n# in one write and the next batch once all P replies are in). "
        "redis-bench: redis-benchmark\n# against the same redis-server (-c clients -P P -d 3). "
        "add = chorus add(\"counter\", 1) = redis INCR.\n# srv us, gen us: CPU time per "
        "operation (user+system) of the server process and of the generator threads in the\n"
        "# timed part; on loopback each side's send also pays for the receiver's TCP "
        "processing.\n",
        cfg.repeats, cfg.gen_threads);
    std::printf("# %-4s %3s %7s %10s %10s %6s %11s %6s %7s %7s %7s %7s\n", "op", "P", "clients",
                "chorus", "redis", "ratio", "redis-bench", "ratio", "chorus", "redis", "chorus",
                "redis");
    std::printf("# %-4s %3s %7s %10s %10s %6s %11s %6s %7s %7s %7s %7s\n", "", "", "", "ops/s",
                "ops/s", "ch/rd", "ops/s", "ch/rb", "srv us", "srv us", "gen us", "gen us");
    for (int depth : cfg.depths) {
      for (int clients : cfg.server_clients) {
        const long ops = depth > 1 ? cfg.server_ops_pipelined : cfg.server_ops;
        BenchmarkRates rb;
        if (redis && !redis_bench.empty()) {
          rb = redis_benchmark(redis_bench, redis->port, clients, depth, ops, cfg.repeats);
        }
        for (store_load::Op op : {store_load::Op::set, store_load::Op::get, store_load::Op::add}) {
          const Cell ch = load_cell(store_load::Proto::chorus, op, server.port(), server.pid(),
                                    clients, depth, ops, cfg.gen_threads, cfg.repeats);
          Cell rd;
          if (redis) {
            rd = load_cell(store_load::Proto::resp, op, redis->port, redis->pid, clients, depth,
                           ops, cfg.gen_threads, cfg.repeats);
          }
          const double rbv = !rb.ok                      ? 0
                             : op == store_load::Op::set ? rb.set
                             : op == store_load::Op::get ? rb.get
                                                         : rb.incr;
          failed = failed || !ch.ok || (redis && !rd.ok);
          auto num = [](bool ok, double v, const char* fmt, char* out, std::size_t n) {
            if (ok) {
              std::snprintf(out, n, fmt, v);
            } else {
              std::snprintf(out, n, "-");
            }
          };
          char c1[32], c2[32], c3[32], c4[32], c5[32], c6[32], c7[32], c8[32], c9[32];
          num(ch.ok, ch.ops_per_s, "%.0f", c1, sizeof(c1));
          num(rd.ok, rd.ops_per_s, "%.0f", c2, sizeof(c2));
          num(ch.ok && rd.ok, ch.ops_per_s / std::max(rd.ops_per_s, 1.0), "%.2f", c3, sizeof(c3));
          num(rbv > 0, rbv, "%.0f", c4, sizeof(c4));
          num(ch.ok && rbv > 0, ch.ops_per_s / std::max(rbv, 1.0), "%.2f", c5, sizeof(c5));
          num(ch.ok, ch.server_us_per_op, "%.2f", c6, sizeof(c6));
          num(rd.ok, rd.server_us_per_op, "%.2f", c7, sizeof(c7));
          num(ch.ok, ch.client_us_per_op, "%.2f", c8, sizeof(c8));
          num(rd.ok, rd.client_us_per_op, "%.2f", c9, sizeof(c9));
          std::printf("  %-4s %3d %7d %10s %10s %6s %11s %6s %7s %7s %7s %7s\n",
                      store_load::op_name(op), depth, clients, c1, c2, c3, c4, c5, c6, c7, c8, c9);
          std::fflush(stdout);
        }
      }
    }
  }

  if (cfg.rss_clients > 0) {
    std::printf(
        "#\n# server memory: %d connections (chorus: each completed the handshake), idle, then "
        "each did one set of its own key\n",
        cfg.rss_clients);
    std::printf("# %-7s %-34s %8s %10s %10s %10s\n", "server", "state", "clients", "RSS(MiB)",
                "peak(MiB)", "KiB/client");
    failed = !measure_rss("chorus", store_load::Proto::chorus, server.port(), server.pid(),
                          cfg.rss_clients) ||
             failed;
    if (redis) {
      failed = !measure_rss("redis", store_load::Proto::resp, redis->port, redis->pid,
                            cfg.rss_clients) ||
               failed;
    }
  }

  if (!cfg.clients.empty() && cfg.clients[0] > 0) {
    std::printf(
        "#\n# TcpStore API throughput: chorus::TcpStore clients are threads in up to %d "
        "processes, one connection each;\n# median of %d runs, %ld ops per run split over the "
        "clients\n",
        cfg.max_procs, cfg.repeats, cfg.ops);
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
                s = connect(server.port());
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
            s = connect(server.port());
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
