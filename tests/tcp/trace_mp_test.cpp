// SPDX-License-Identifier: BSD-3-Clause
// The flight recorder on real failing runs: each scenario makes three ranks fail the way jobs
// do (a stopped rank, a killed rank, a mismatched collective), lets the survivors write their
// dumps, then runs chorus-trace's analysis on the folder and checks that it tells the story.
// Plus a SIGUSR1 dump of a healthy process. Ranks coordinate through store keys; files are
// awaited with inotify, never by sleeping.
#include <signal.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chorus/shared_buffer.hpp>
#include <chorus/store.hpp>

#include "tcp/mp_common.hpp"
#include "trace_report.hpp"

namespace chorus::test {
namespace {

constexpr auto kTimeout = 2000ms;

// A fresh folder for one scenario's dumps (removed by the destructor).
struct TraceDir {
  std::string path;
  TraceDir() {
    char templ[] = "/tmp/chorus-trace-test-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    path = templ;
  }
  ~TraceDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Child side: every rank dumps into `dir` under its own name.
void use_trace_dir(const std::string& dir, int rank) {
  ::setenv("CHORUS_TRACE_DIR", dir.c_str(), 1);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
}

// True if one line of `text` contains every part, in order.
bool has_line(const std::string& text, const std::vector<std::string>& parts) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::size_t at = 0;
    bool all = true;
    for (const auto& part : parts) {
      at = line.find(part, at);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      at += part.size();
    }
    if (all) {
      return true;
    }
  }
  return false;
}

std::string analyse(const std::string& dir, std::size_t& groups) {
  std::vector<std::string> problems;
  const auto views = trace_tool::load_dumps(dir, problems);
  INFO(fmt::format("{}", fmt::join(problems, "\n")));
  REQUIRE(problems.empty());
  groups = views.size();
  return trace_tool::report(views, 6);
}

// Runs the chorus-trace binary (CHORUS_TRACE_EXE, set by meson); returns {exit code, stdout}.
std::pair<int, std::string> run_tool(const std::string& args) {
  const char* exe = std::getenv("CHORUS_TRACE_EXE");
  REQUIRE(exe != nullptr);
  FILE* pipe = ::popen(fmt::format("{} {} 2>/dev/null", exe, args).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) {
    out.append(buf, n);
  }
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Waits until `dir/name` exists (renamed into place by the dumper), up to `bound`.
bool wait_for_file(const std::string& dir, const std::string& name, Duration bound) {
  const int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) {
    return false;
  }
  ::inotify_add_watch(fd, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
  const Deadline deadline = Deadline::after(bound);
  bool found = std::filesystem::exists(dir + "/" + name);
  while (!found && !deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(deadline.remaining().count()));
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    found = std::filesystem::exists(dir + "/" + name);
  }
  ::close(fd);
  return found;
}

// Child side: SIGUSR1 dumps this rank's recorder into `dir` (use_trace_dir()); the dump's groups.
std::vector<trace_tool::GroupView> dump_own_recorder(const std::string& dir, int rank) {
  ::raise(SIGUSR1);
  CHILD_CHECK(wait_for_file(dir, fmt::format("rank{}.json", rank), 20s));
  std::ifstream in(fmt::format("{}/rank{}.json", dir, rank));
  std::stringstream text;
  text << in.rdbuf();
  return trace_tool::parse_dump(text.str(), "x");
}

// Two ranks dumping into `dir`, each with `name`=`value` in its environment, a group on loopback
// (30 s timeout), and body(rank, group); the whole run bounded by 60 s.
std::vector<ChildResult> run_traced_pair(const std::string& dir, const char* name,
                                         const char* value,
                                         const std::function<void(int, ProcessGroup&)>& body) {
  StoreServerProcess server;
  return run_processes(
      2,
      [&](int rank) {
        use_trace_dir(dir, rank);
        ::setenv(name, value, 1);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 2, loopback_options(30s));
        body(rank, *pg);
        pg->barrier()->wait();  // both read their files before either group goes away
      },
      60s);
}

}  // namespace

TEST_CASE("chorus-trace names a stopped rank that never reported, from the survivors' dumps",
          "[tcp][mp][trace]") {
  StoreServerProcess server;
  TraceDir dir;
  const auto results = run_processes(
      3,
      [&](int rank) {
        use_trace_dir(dir.path, rank);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(kTimeout));
        std::vector<float> data(256, 1.0f);
        for (int i = 0; i < 3; ++i) {
          pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
        }
        if (rank == 2) {
          store->set("pid/2", std::to_string(::getpid()));
          ::raise(SIGSTOP);  // rank 0 SIGKILLs it once both survivors dumped
          return;
        }
        expect_error([&] { pg->allreduce(Tensor::of(data.data(), data.size()))->wait(); });
        // The dump was written before the op failed (the group's failure writes it first).
        CHILD_CHECK(std::filesystem::exists(fmt::format("{}/rank{}.json", dir.path, rank)));
        store->set(fmt::format("dumped/{}", rank), "1");
        if (rank == 0) {
          store->wait({"dumped/1"}, 30s);
          const auto bytes = store->get("pid/2", 30s);
          const int pid = std::stoi(std::string(bytes.begin(), bytes.end()));
          ::kill(pid, SIGKILL);
        }
      },
      60s);
  INFO(describe(results));
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  REQUIRE(results[2].signal == SIGKILL);
  std::size_t groups = 0;
  const std::string report = analyse(dir.path, groups);
  INFO(report);
  CHECK(groups == 2);
  CHECK(report.find("group 'world' (3 ranks): dumps from 2 of them") != std::string::npos);
  CHECK(report.find("never reported: rank 2 ") != std::string::npos);
  CHECK(report.find("first failure: rank ") != std::string::npos);
  CHECK(report.find("rank 2 (127.0.0.1:") != std::string::npos);  // the timeout names it
  CHECK(report.find("failures: rank 0 names 2; rank 1 names 2") != std::string::npos);
  CHECK(report.find("named by every other failed rank: rank 2 ") != std::string::npos);
  // All three ranks on this host: a small allreduce goes through the board.
  CHECK(has_line(report, {" 4 allreduce", "256 x float32", "board", "started"}));
  // The ones before it ran on the issuing thread: recorded once started, ended with one store.
  CHECK(has_line(report, {" 3 allreduce", "256 x float32", "board", "completed"}));
  CHECK(report.find("timed out") != std::string::npos);
  // The installed tool prints the same report.
  CHECK(run_tool("--last 6 " + dir.path) == std::make_pair(0, report));
}

TEST_CASE("chorus-trace's command line", "[tcp][trace]") {
  TraceDir empty;
  CHECK(run_tool(empty.path).first == 1);
  CHECK(run_tool("").first == 2);
  CHECK(run_tool("--last 0 " + empty.path).first == 2);
  CHECK(run_tool("/nonexistent/folder").first == 2);
  CHECK(run_tool("--help").first == 0);
}

// Address space for the tool in the test below: far less than reading either big file whole
// would take. AddressSanitizer reserves terabytes of shadow memory, so its build runs the
// tool without the limit (the skip messages are still checked).
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kToolLimit = "";
#else
constexpr const char* kToolLimit = "ulimit -v 262144; ";  // 256 MiB
#endif

// A folder with one real dump, a 1 GiB file that is not a dump (sparse: no disk, no time to
// write) and a 300 MiB file that starts like a dump: the tool recognizes the first by its
// first bytes and the second by its size, skips both unread with the reason, and reports the
// real dump, inside 256 MiB of address space.
TEST_CASE("chorus-trace skips big files unread: a non-dump by its first bytes, a dump by size",
          "[tcp][trace]") {
  TraceDir dir;
  const std::string dump =
      "{\n \"dumped_us\": 1,\n \"format\": \"chorus-flight-recorder\",\n \"groups\": [{\"name\": "
      "\"world\", \"rank\": 0, \"size\": 1, \"ops\": []}],\n \"process\": {\"pid\": 7, \"host\": "
      "\"h\", \"rank\": \"0\"},\n \"reason\": \"test\",\n \"version\": 1\n}\n";
  std::ofstream(dir.path + "/rank0.json") << dump;
  std::ofstream(dir.path + "/big.json") << "[\"not a dump\", ";
  std::filesystem::resize_file(dir.path + "/big.json", std::uintmax_t{1} << 30);
  std::ofstream(dir.path + "/huge-dump.json") << dump.substr(0, dump.size() - 2);
  std::filesystem::resize_file(dir.path + "/huge-dump.json", std::uintmax_t{300} << 20);
  const char* exe = std::getenv("CHORUS_TRACE_EXE");
  REQUIRE(exe != nullptr);
  FILE* pipe = ::popen(fmt::format("{}{} {} 2>&1", kToolLimit, exe, dir.path).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) {
    out.append(buf, n);
  }
  const int status = ::pclose(pipe);
  INFO(out);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(has_line(out, {"big.json: skipped: not a chorus flight recorder dump", "first 4096 bytes",
                       "1073741824 bytes was not read"}));
  CHECK(
      has_line(out, {"huge-dump.json: skipped: 300 MiB, more than the 256 MiB", "--max-dump-mib"}));
  CHECK(contains(out, "world"));
}

TEST_CASE("chorus-trace on a killed rank: the survivors' first failure names it",
          "[tcp][mp][trace]") {
  StoreServerProcess server;
  TraceDir dir;
  const auto results = run_processes(
      3,
      [&](int rank) {
        use_trace_dir(dir.path, rank);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(30s));
        std::vector<double> data(64, 1.0);
        for (int i = 0; i < 2; ++i) {
          pg->allreduce(Tensor::of(data.data(), data.size()))->wait();
        }
        if (rank == 1) {
          // Dies once both others have issued seq 3 (so neither is "behind").
          store->wait({"issued/0", "issued/2"}, 30s);
          ::raise(SIGKILL);
        }
        auto work = pg->allreduce(Tensor::of(data.data(), data.size()));
        store->set(fmt::format("issued/{}", rank), "1");
        expect_error([&] { work->wait(); });
      },
      60s);
  INFO(describe(results));
  REQUIRE(results[0].ok());
  REQUIRE(results[2].ok());
  std::size_t groups = 0;
  const std::string report = analyse(dir.path, groups);
  INFO(report);
  CHECK(groups == 2);
  CHECK(report.find("never reported: rank 1 ") != std::string::npos);
  CHECK(report.find("first failure: rank ") != std::string::npos);
  CHECK(report.find("rank 1 (127.0.0.1:") != std::string::npos);
  CHECK(report.find("behind") == std::string::npos);  // both survivors issued seq 3
  // The dumps show the op in flight when the group failed, on both survivors.
  CHECK(has_line(report, {"0      3 allreduce", "64 x float64"}));
  CHECK(has_line(report, {"2      3 allreduce", "64 x float64"}));
}

TEST_CASE("chorus-trace shows the op that differs between ranks at one sequence number",
          "[tcp][mp][trace]") {
  StoreServerProcess server;
  TraceDir dir;
  const auto results = run_processes(
      3,
      [&](int rank) {
        use_trace_dir(dir.path, rank);
        auto store = child_store(server.port());
        auto pg = make_tcp_group(store, rank, 3, loopback_options(30s));
        std::vector<float> in(8, 1.0f), out(24, 0.0f);
        pg->allreduce(Tensor::of(in.data(), in.size()))->wait();
        expect_error([&] {
          if (rank == 1) {
            pg->allgather(Tensor::of(in.data(), in.size()), Tensor::of(out.data(), out.size()))
                ->wait();
          } else {
            pg->allreduce(Tensor::of(in.data(), in.size()))->wait();
          }
        });
      },
      60s);
  REQUIRE_ALL_OK(results);
  std::size_t groups = 0;
  const std::string report = analyse(dir.path, groups);
  INFO(report);
  CHECK(groups == 3);
  // A rank may hear of the failure before it issues seq 2, but the two that saw the mismatch
  // (rank 1 and a peer) had both issued it.
  CHECK(has_line(report, {"mismatch at seq 2: rank 1: allgather 8 x float32; rank ",
                          ": allreduce 8 x float32"}));
  CHECK(report.find("never reported") == std::string::npos);
}

TEST_CASE("SIGUSR1 dumps a healthy process's recorder; CHORUS_TRACE_BUFFER bounds it",
          "[tcp][mp][trace]") {
  TraceDir dir;
  const auto results =
      run_traced_pair(dir.path, "CHORUS_TRACE_BUFFER", "4", [&](int rank, ProcessGroup& pg) {
        std::vector<std::int32_t> data(1 << 18, rank);  // 1 MiB: the ring algorithm
        for (int i = 0; i < 5; ++i) {
          pg.allreduce(Tensor::of(data.data(), data.size()))->wait();
        }
        pg.barrier()->wait();
        const auto views = dump_own_recorder(dir.path, rank);
        CHILD_CHECK(views.size() == 1);
        const auto& v = views[0];
        CHILD_CHECK(v.recorded == 6 && v.ops.size() == 4 && v.failure.empty());
        CHILD_CHECK(v.ops.front().seq == 3 && v.ops.back().seq == 6);
        CHILD_CHECK(v.ops.back().op == "barrier" && v.ops.back().algorithm == "dissemination");
        CHILD_CHECK(v.ops[0].op == "allreduce");
        CHILD_CHECK(v.ops[0].algorithm == "ring");
        CHILD_CHECK(v.ops[0].state == "completed");
        CHILD_CHECK(v.ops[0].count == (1u << 18));
        CHILD_CHECK(v.ops[0].dtype == "int32");
        for (const auto& o : v.ops) {
          CHILD_CHECK(o.issued_us <= o.started_us && o.started_us <= o.ended_us);
        }
      });
  REQUIRE_ALL_OK(results);
}

// The recorder names the algorithm an op ran, also where the ranks chose it inside the op by
// agreeing on their memory kinds: SharedBuffers on both ranks map each other (direct); on one
// rank only, both run what ordinary memory gets (ring), the SharedBuffer rank after its
// agreement phase.
TEST_CASE("the recorder names the algorithm that memory kinds agreed on", "[tcp][mp][trace]") {
  TraceDir dir;
  const auto results =
      run_traced_pair(dir.path, "CHORUS_TRANSPORT", "shm", [&](int rank, ProcessGroup& pg) {
        constexpr std::size_t kCount = 1 << 18;  // 1 MiB of int32
        SharedBuffer shared(kCount * sizeof(std::int32_t));
        std::vector<std::int32_t> ordinary(kCount, rank);
        auto* in_shared = static_cast<std::int32_t*>(shared.data());
        std::fill(in_shared, in_shared + kCount, rank);
        pg.allreduce(Tensor::of(in_shared, kCount))->wait();  // both SharedBuffers
        std::int32_t* mixed = rank == 0 ? in_shared : ordinary.data();
        std::fill(mixed, mixed + kCount, rank);
        pg.allreduce(Tensor::of(mixed, kCount))->wait();  // rank 0's only
        CHILD_CHECK(in_shared[0] == 1 && mixed[kCount - 1] == 1);
        const auto views = dump_own_recorder(dir.path, rank);
        CHILD_CHECK(views.size() == 1 && views[0].ops.size() == 2);
        const auto& ops = views[0].ops;
        if (ops[0].algorithm != "direct" || ops[1].algorithm != "ring") {
          throw ChildCheckFailed{
              fmt::format("rank {}: recorded {} and {}", rank, ops[0].algorithm, ops[1].algorithm)};
        }
      });
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
