// SPDX-License-Identifier: BSD-3-Clause
// bootstrap_perf: time to a formed group for N simulated ranks (default N = 1024, 4096, 16384)
// against one TcpStore server, and the server's peak memory.
//
// Each simulated rank does what a real rank does in build_mesh (src/cpu/transports/socket/mesh.cpp)
// before the mesh connections: it binds a listening socket (port 0) and calls cpu::join_group on
// the group's store namespace (a PrefixStore, as make_tcp_group makes one) with its listener's
// "host:port" and its ring neighbours as the ranks to read with the outcome (as build_mesh asks),
// then looks their addresses up (cpu::fetch_addresses, which asks the store only for those not
// read yet). Internal API: this benchmark links the internal layers (scripts/check_layering.sh
// lets it, and only it, in bench/).
//
// The server (TcpStoreServer) runs in its own forked process on 127.0.0.1, a fresh one per N;
// its peak RSS (VmHWM) is reported after the N's runs. Ranks are threads (small stacks) spread
// over -p processes, each with its own store connection and its own listener. Rank r uses the
// loopback address 127.(1 + r / 62500).(1 + r / 250 % 250).(1 + r % 250) both as the store
// connection's source address (TcpStoreOptions::source_address) and for its listener, so that
// 16384 connections, run after run (TIME_WAIT), never exhaust one address's ephemeral ports.
// All ranks are armed first (connected, listening), then released at once through a pipe; time
// runs from the release to the last rank's return (CLOCK_MONOTONIC is shared by processes).
//
// --kill-one: rank N/2 connects and listens, then leaves at the release without joining (its
// thread closes its listener and store connection). Every other rank must then fail at its
// deadline (-t) with a TimeoutError whose message names rank N/2; the first one is printed.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>
#include <chorus/tcp_store.hpp>

#include "cpu/bootstrap/host_id.hpp"
#include "cpu/bootstrap/membership.hpp"
#include "net/listener.hpp"
#include "store_bench_util.hpp"

namespace {

using namespace chorus::bench;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Config {
  std::vector<int> ranks = {1024, 4096, 16384};
  int procs = 16;
  int runs = 3;
  int timeout_s = 60;
  bool kill_one = false;
  int stack_kib = 256;
};

// Rank r's loopback address: its store connection's source and its listener.
std::string rank_address(int r) {
  return fmt::format("127.{}.{}.{}", 1 + r / 62500, 1 + r / 250 % 250, 1 + r % 250);
}

// True if `text` names rank k: as a number of its own (not part of a larger number, an address
// or a "rank/size"), or inside a range "a-b".
bool names_rank(const std::string& text, int k) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
      ++j;
    }
    const char before = i > 0 ? text[i - 1] : ' ';
    const char after = j < text.size() ? text[j] : ' ';
    const long a = std::atol(text.substr(i, j - i).c_str());
    const bool part_of_something = before == '/' || before == '.' || before == ':' ||
                                   after == '/' || after == ':' ||
                                   (after == '.' && j + 1 < text.size() &&
                                    std::isdigit(static_cast<unsigned char>(text[j + 1])));
    if (!part_of_something) {
      if (a == k) {
        return true;
      }
      if (after == '-' && j + 1 < text.size() &&
          std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
        const long b = std::atol(text.c_str() + j + 1);
        if (a <= k && k <= b) {
          return true;
        }
      }
    }
    i = j;
  }
  return false;
}

// What one rank process reports after its ranks returned: one write below PIPE_BUF (atomic).
struct ProcReport {
  std::int32_t proc = 0;
  std::int32_t failures = 0;         // ranks whose join_group (or lookup) threw
  std::int32_t timeouts_naming = 0;  // of those: TimeoutErrors whose message names the victim
  std::int32_t first_failed_rank = -1;
  Clock::rep last_end = 0;       // the last rank's return (or failure)
  Clock::rep first_failure = 0;  // when first_failed_rank failed
  char first_error[1900] = {};   // its error text (truncated)
  // --kill-one: the first error that does not name the victim (when there is one).
  std::int32_t other_rank = -1;
  char other_error[1900] = {};
};
static_assert(sizeof(ProcReport) < PIPE_BUF, "one atomic pipe write");

struct RunResult {
  bool ok = false;         // every process reported and exited cleanly
  double seconds = 0;      // release to the last rank's return
  double median_rank = 0;  // release to the median rank's return
  int failures = 0;
  int timeouts_naming = 0;
  int first_failed_rank = -1;
  std::string first_error;
  int other_rank = -1;  // --kill-one: a rank whose error does not name the victim
  std::string other_error;
};

// One thread with a small stack.
class SmallThread {
 public:
  SmallThread(std::function<void()> body, std::size_t stack_bytes)
      : body_(std::make_unique<std::function<void()>>(std::move(body))) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes);
    const int rc = pthread_create(
        &thread_, &attr,
        [](void* arg) -> void* {
          (*static_cast<std::function<void()>*>(arg))();
          return nullptr;
        },
        body_.get());
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      std::fprintf(stderr, "bootstrap_perf: pthread_create: %s\n", std::strerror(rc));
      _exit(3);
    }
  }
  void join() { pthread_join(thread_, nullptr); }

 private:
  std::unique_ptr<std::function<void()>> body_;
  pthread_t thread_{};
};

// The body of one rank process: ranks [first, last) of n as threads.
// Each rank's return time goes to ends[rank] (shared with the parent).
[[noreturn]] void rank_process(const Config& cfg, int proc, int first, int last, int n, int run,
                               std::uint16_t port, Clock::rep* ends, int armed_fd, int release_fd,
                               int done_fd, int finish_fd) {
  raise_open_file_limit();
  const int victim = cfg.kill_one ? n / 2 : -1;
  const std::string host_id = chorus::cpu::local_host_id();
  const auto timeout = std::chrono::seconds(cfg.timeout_s);
  // Readable once the parent says every process is done: the ranks stop listening then.
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::mutex mu;
  std::condition_variable cv;  // the process's main thread: ranks armed, ranks returned
  // The ranks' release: an atomic wait wakes them all without a mutex to pass from one to the
  // next (a condition variable would start them one after another, inside the timed window).
  std::atomic<bool> go{false};
  int ready = 0;
  int returned = 0;
  int setup_failures = 0;
  ProcReport report;
  report.proc = proc;
  std::vector<SmallThread> threads;
  threads.reserve(static_cast<std::size_t>(last - first));
  for (int rank = first; rank < last; ++rank) {
    threads.emplace_back(
        [&, rank] {
          std::shared_ptr<chorus::TcpStore> base;
          std::shared_ptr<chorus::Store> store;
          chorus::net::Listener listener;
          const std::string address = rank_address(rank);
          bool set_up = false;
          try {
            chorus::TcpStoreOptions o;
            o.host = "127.0.0.1";
            o.port = port;
            o.timeout = timeout + 60s;
            o.token = "";
            o.source_address = address;
            base = std::make_shared<chorus::TcpStore>(o);
            // The group's namespace, as make_tcp_group makes it ("tcp/g1" under the job's).
            store = chorus::make_prefix_store(
                "tcp/g1", chorus::make_prefix_store(fmt::format("run{}", run), base));
            listener = chorus::net::Listener::bind(address, 0);
            set_up = true;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "bootstrap_perf: rank %d setup: %s\n", rank, e.what());
          }
          {
            std::unique_lock<std::mutex> lock(mu);
            ++ready;
            setup_failures += set_up ? 0 : 1;
            cv.notify_one();
          }
          go.wait(false);
          std::string error;
          bool named = false;
          if (rank == victim) {
            // Dies mid-bootstrap: connected and listening, gone before it publishes anything.
            listener.close();
            store.reset();
            base.reset();
          } else if (set_up && setup_failures == 0) {
            try {
              chorus::cpu::MembershipOptions mo;
              mo.rank = rank;
              mo.size = n;
              mo.where = fmt::format("tcp group setup on rank {}/{} [bench]", rank, n);
              mo.group = "bench";
              mo.timeout = timeout;
              mo.deadline = chorus::Deadline::after(timeout);
              mo.local_address = listener.address().to_string();
              mo.host_id = host_id;
              // As build_mesh: the ring neighbours' addresses come with the formation's outcome.
              if (n > 1) {
                mo.prefetch = {(rank + 1) % n, (rank + n - 1) % n};
              }
              if (rank == 0) {
                // As build_mesh: rank 0 drains its listener (the others' liveness probes).
                mo.between_slices = [&listener] {
                  while (listener.accept().io.ok()) {
                  }
                };
              }
              chorus::cpu::Membership m = chorus::cpu::join_group(*store, mo);
              // Ring neighbours' addresses, as a ring's connections need them (read with the
              // outcome above, so this asks the store nothing unless one of them left).
              if (n > 1) {
                const int prev = (rank + n - 1) % n;
                const int next = (rank + 1) % n;
                if (!chorus::cpu::fetch_addresses(*store, m, {prev, next}, mo.deadline).empty()) {
                  throw std::runtime_error("a ring neighbour left before its address was read");
                }
              }
            } catch (const chorus::TimeoutError& e) {
              error = e.what();
              named = victim >= 0 && names_rank(error, victim);
            } catch (const std::exception& e) {
              error = e.what();
              if (error.empty()) {
                error = "(empty error message)";
              }
            }
          }
          const auto end = Clock::now().time_since_epoch().count();
          ends[rank] = end;
          {
            std::lock_guard<std::mutex> lock(mu);
            ++returned;
            report.last_end = std::max(report.last_end, end);
            if (!error.empty()) {
              ++report.failures;
              report.timeouts_naming += named ? 1 : 0;
              if (report.first_failed_rank < 0 || end < report.first_failure) {
                report.first_failed_rank = rank;
                report.first_failure = end;
                std::snprintf(report.first_error, sizeof(report.first_error), "%s", error.c_str());
              }
              if (victim >= 0 && !named && report.other_rank < 0) {
                report.other_rank = rank;
                std::snprintf(report.other_error, sizeof(report.other_error), "%s", error.c_str());
              }
            }
            if (returned == last - first) {
              cv.notify_one();  // only the last: the main thread waits for them all
            }
          }
          // A real rank keeps listening for its group's life: answer (and drop) connections,
          // such as liveness probes, until every rank of the run returned.
          if (listener.valid()) {
            for (;;) {
              pollfd fds[2] = {{listener.fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
              if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
                break;
              }
              if (fds[1].revents != 0) {
                break;
              }
              while (listener.accept().io.ok()) {
              }
            }
          }
        },
        static_cast<std::size_t>(cfg.stack_kib) * 1024);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready == last - first; });
  }
  (void)!::write(armed_fd, "a", 1);
  char b;
  if (!read_full(release_fd, &b, 1, 3600 * 1000)) {
    _exit(2);
  }
  go = true;
  go.notify_all();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return returned == last - first; });
    report.failures += setup_failures;
  }
  (void)!::write(done_fd, &report, sizeof(report));
  (void)read_full(finish_fd, &b, 1, 3600 * 1000);
  const std::uint64_t one = 1;
  (void)!::write(stop_fd, &one, sizeof(one));
  for (auto& t : threads) {
    t.join();
  }
  std::fflush(stderr);
  _exit(setup_failures == 0 ? 0 : 1);
}

RunResult run_ranks(const Config& cfg, int n, int run, std::uint16_t port) {
  RunResult result;
  const int procs = std::min(n, cfg.procs);
  int armed[2], release[2], done[2], finish[2];
  if (::pipe(armed) != 0 || ::pipe(release) != 0 || ::pipe(done) != 0 || ::pipe(finish) != 0) {
    std::perror("pipe");
    return result;
  }
  const std::size_t ends_bytes = sizeof(Clock::rep) * static_cast<std::size_t>(n);
  void* shared =
      ::mmap(nullptr, ends_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("mmap");
    return result;
  }
  auto* ends = static_cast<Clock::rep*>(shared);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int p = 0; p < procs; ++p) {
    const int first = static_cast<int>(static_cast<long>(n) * p / procs);
    const int last = static_cast<int>(static_cast<long>(n) * (p + 1) / procs);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(armed[0]);
      ::close(release[1]);
      ::close(done[0]);
      ::close(finish[1]);
      rank_process(cfg, p, first, last, n, run, port, ends, armed[1], release[0], done[1],
                   finish[0]);
    }
    pids.push_back(pid);
  }
  ::close(armed[1]);
  ::close(release[0]);
  ::close(done[1]);
  ::close(finish[0]);
  std::vector<char> buf(static_cast<std::size_t>(procs), 'g');
  // Arming (connecting N clients, binding N listeners) is not timed but bounded.
  bool ok = read_full(armed[0], buf.data(), buf.size(), 600 * 1000);
  const auto start = Clock::now();
  Clock::rep last_end = start.time_since_epoch().count();
  Clock::rep first_failure = 0;
  if (ok) {
    (void)!::write(release[1], buf.data(), buf.size());
    const int wait_ms = (cfg.timeout_s + 300) * 1000;
    for (int p = 0; p < procs && ok; ++p) {
      ProcReport r;
      ok = read_full(done[0], &r, sizeof(r), wait_ms);
      if (!ok) {
        break;
      }
      last_end = std::max(last_end, r.last_end);
      result.failures += r.failures;
      result.timeouts_naming += r.timeouts_naming;
      if (r.first_failed_rank >= 0 &&
          (result.first_failed_rank < 0 || r.first_failure < first_failure)) {
        result.first_failed_rank = r.first_failed_rank;
        first_failure = r.first_failure;
        result.first_error = r.first_error;
      }
      if (r.other_rank >= 0 && result.other_rank < 0) {
        result.other_rank = r.other_rank;
        result.other_error = r.other_error;
      }
    }
    (void)!::write(finish[1], buf.data(), buf.size());
  } else {
    std::fprintf(stderr, "bootstrap_perf: the ranks were not armed within 600 s\n");
  }
  for (pid_t pid : pids) {
    if (!ok) {
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  ::close(armed[0]);
  ::close(release[1]);
  ::close(done[0]);
  ::close(finish[1]);
  result.ok = ok;
  result.seconds =
      std::chrono::duration<double>(Clock::duration(last_end) - start.time_since_epoch()).count();
  if (ok) {
    std::vector<Clock::rep> sorted(ends, ends + n);
    std::sort(sorted.begin(), sorted.end());
    result.median_rank =
        std::chrono::duration<double>(Clock::duration(sorted[static_cast<std::size_t>(n / 2)]) -
                                      start.time_since_epoch())
            .count();
  }
  ::munmap(shared, ends_bytes);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    command += std::string(" ") + argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bootstrap_perf: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-n" || a == "--ranks") {
      cfg.ranks = parse_list(next());
    } else if (a == "-p" || a == "--procs") {
      cfg.procs = std::max(1, std::atoi(next()));
    } else if (a == "-r" || a == "--runs") {
      cfg.runs = std::max(1, std::atoi(next()));
    } else if (a == "-t" || a == "--timeout") {
      cfg.timeout_s = std::max(1, std::atoi(next()));
    } else if (a == "--kill-one") {
      cfg.kill_one = true;
    } else if (a == "--stack-kib") {
      cfg.stack_kib = std::max(64, std::atoi(next()));
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: bootstrap_perf [-n 1024,4096,16384] [-p PROCS] [-r RUNS] [-t SECONDS] "
          "[--kill-one] [--stack-kib KIB]\n"
          "  -n  rank counts (default 1024,4096,16384)\n"
          "  -p  rank processes; the ranks are threads spread over them (default 16)\n"
          "  -r  runs per rank count; the median is printed (default 3)\n"
          "  -t  each rank's setup timeout in seconds (default 60)\n"
          "  --kill-one   rank N/2 leaves at the release without joining: every other rank must\n"
          "               fail with a TimeoutError naming it (exit status 1 otherwise)\n"
          "  --stack-kib  stack size of each rank thread (default 256)\n");
      return 0;
    } else {
      std::fprintf(stderr, "bootstrap_perf: unknown option %s (try --help)\n", a.c_str());
      return 2;
    }
  }
  for (int n : cfg.ranks) {
    if (n < 1 || n > 62500 * 200) {
      std::fprintf(stderr, "bootstrap_perf: rank count %d out of range\n", n);
      return 2;
    }
    if (cfg.kill_one && n < 2) {
      std::fprintf(stderr, "bootstrap_perf: --kill-one needs at least 2 ranks\n");
      return 2;
    }
  }
  raise_open_file_limit();
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  std::printf("# %s\n", command.c_str());
  std::printf(
      "# bootstrap_perf: N ranks each bind a listener on its own 127.x.y.z, connect to the store "
      "from that address and call cpu::join_group (then look up its ring neighbours); time from "
      "a common release to the last rank's return\n");
  std::printf(
      "# TcpStoreServer in its own process on 127.0.0.1 (a fresh one per N); ranks are threads "
      "in %d processes (%d KiB stacks); open file limit %llu; %u CPUs; median of %d runs; "
      "setup timeout %d s%s\n",
      cfg.procs, cfg.stack_kib, static_cast<unsigned long long>(rl.rlim_cur),
      std::thread::hardware_concurrency(), cfg.runs, cfg.timeout_s,
      cfg.kill_one ? "; --kill-one: rank N/2 leaves without joining" : "");
  std::printf(
      "# median(s): release to the last rank's return, median of the runs; half(s): to "
      "the median rank's return; server RSS: the server process's VmHWM\n");
  std::printf("# %8s %6s %12s %12s %10s %16s\n", "ranks", "procs", "median(s)", "ranks/s",
              "half(s)", "server RSS(MiB)");
  std::fflush(stdout);

  bool failed = false;
  for (int n : cfg.ranks) {
    ServerProcess server;
    std::vector<double> times;
    std::vector<double> halves;
    std::vector<std::string> kill_reports;
    bool n_failed = false;
    for (int run = 0; run < cfg.runs; ++run) {
      const RunResult r = run_ranks(cfg, n, run, server.port());
      if (!r.ok) {
        n_failed = true;
        std::fprintf(stderr, "bootstrap_perf: %d ranks, run %d: a rank process failed\n", n,
                     run + 1);
        break;
      }
      if (cfg.kill_one) {
        const int victim = n / 2;
        const bool all_named = r.failures == n - 1 && r.timeouts_naming == n - 1;
        kill_reports.push_back(fmt::format(
            "#   run {}: rank {} left; {} of {} other ranks failed, {} with a TimeoutError naming "
            "rank {}, the last after {:.2f} s: {}\n#   first error (rank {}): {}",
            run + 1, victim, r.failures, n - 1, r.timeouts_naming, victim, r.seconds,
            all_named ? "OK" : "FAILED", r.first_failed_rank, r.first_error));
        if (r.other_rank >= 0) {
          kill_reports.push_back(
              fmt::format("#   an error that does not name rank {} (rank {}): {}", victim,
                          r.other_rank, r.other_error));
        }
        n_failed = n_failed || !all_named;
        times.push_back(r.seconds);
        continue;
      }
      if (r.failures > 0) {
        n_failed = true;
        std::fprintf(stderr,
                     "bootstrap_perf: %d ranks, run %d: %d ranks failed; the first (rank %d): %s\n",
                     n, run + 1, r.failures, r.first_failed_rank, r.first_error.c_str());
        break;
      }
      times.push_back(r.seconds);
      halves.push_back(r.median_rank);
    }
    const long hwm_kib = proc_status_kib(server.pid(), "VmHWM");
    const double rss_mib = hwm_kib < 0 ? -1 : static_cast<double>(hwm_kib) / 1024;
    if (cfg.kill_one) {
      std::printf("  %8d %6d %12.3f %12s %10s %16.1f   (kill-one: time to the last failure)\n", n,
                  std::min(n, cfg.procs), median(times), "-", "-", rss_mib);
      for (const auto& k : kill_reports) {
        std::printf("%s\n", k.c_str());
      }
    } else if (n_failed || times.empty()) {
      std::printf("  %8d %6d %12s %12s %10s %16.1f\n", n, std::min(n, cfg.procs), "FAILED", "-",
                  "-", rss_mib);
    } else {
      const double t = median(times);
      std::printf("  %8d %6d %12.3f %12.0f %10.3f %16.1f\n", n, std::min(n, cfg.procs), t, n / t,
                  median(halves), rss_mib);
    }
    std::fflush(stdout);
    failed = failed || n_failed;
  }
  return failed ? 1 : 0;
}
