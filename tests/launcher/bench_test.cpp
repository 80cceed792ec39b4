// SPDX-License-Identifier: BSD-3-Clause
// The *_perf benchmarks end to end: short checked sweeps of every one on 2 and 3 ranks under
// chorusrun, every op and type exact, a planted corruption caught by -c, one process without any
// launcher, the JSON record, a restart with real ranks, and Open MPI's mpirun ([mpirun]: run as
// its own meson test, which skips with 77 when mpirun is not installed).
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "spawn.hpp"

using namespace launcher_test;

namespace {

std::string bench_bin(const std::string& name) { return binary("BENCH_DIR") + "/" + name; }

// A short sweep: 8, 64, 512, 4096 bytes; 2 timed iterations; one exact check per size.
const std::vector<std::string> kShortSweep = {"-b", "8", "-e", "4K", "-f", "8",
                                              "-n", "2", "-w", "1",  "-c", "1"};

Process run_bench(int ranks, const std::string& name, std::vector<std::string> flags,
                  std::vector<std::string> chorusrun_flags = {}) {
  std::vector<std::string> argv{binary("CHORUSRUN"), "--standalone", "-n", std::to_string(ranks)};
  argv.insert(argv.end(), chorusrun_flags.begin(), chorusrun_flags.end());
  argv.push_back(bench_bin(name));
  argv.insert(argv.end(), flags.begin(), flags.end());
  return run(argv, Seconds(90), {}, launcher_vars());
}

// Data rows of the table: lines whose first field (after a rank prefix, if any) is a size.
int table_rows(const std::string& output) {
  static const std::regex row(
      R"((^|\n)(\[rank 0\] )? +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ +-?[0-9]+ )");
  int n = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row);
       it != std::sregex_iterator(); ++it) {
    ++n;
  }
  return n;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (::access((dir + "/" + program).c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("every benchmark passes a short checked sweep on 2 and 3 ranks", "[launcher][bench]") {
  const std::vector<std::string> benches = {
      "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
      "reduce_perf",     "alltoall_perf",   "sendrecv_perf",       "barrier_perf"};
  for (int ranks : {2, 3}) {
    for (const auto& name : benches) {
      std::vector<std::string> flags = kShortSweep;
      if (name == "broadcast_perf" || name == "reduce_perf") {
        flags.insert(flags.end(), {"-r", std::to_string(ranks - 1)});  // a root other than 0
      }
      const Process p = run_bench(ranks, name, flags);
      INFO(name << " on " << ranks << " ranks:\n" << p.output);
      CHECK(shell_status(p) == 0);
      CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
      CHECK_THAT(p.output, Catch::Contains("# nRanks " + std::to_string(ranks) + " "));
      CHECK_THAT(p.output, Catch::Contains("# Collective test concluded: " + name));
      CHECK(table_rows(p.output) == (name == "barrier_perf" ? 1 : 4));
      CHECK(count(p.output, "#  Rank ") == ranks);
    }
  }
}

TEST_CASE("every reduction op and data type is exact", "[launcher][bench]") {
  for (const std::string name : {"all_reduce_perf", "reduce_scatter_perf"}) {
    const Process p = run_bench(
        3, name,
        {"-b", "192", "-e", "192", "-o", "all", "-d", "all", "-n", "1", "-w", "0", "-c", "1"});
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
    // Every (type, op) pair has its row, with 0 wrong elements in both halves.
    std::set<std::string> pairs;
    static const std::regex row(
        R"( +[0-9]+ +[0-9]+ +([a-z0-9]+) +([a-z]+) +-1 +[0-9.e+]+ +[0-9.e+]+ +[0-9.e+]+ +0 +[0-9.e+]+ +[0-9.e+]+ +[0-9.e+]+ +0\n)");
    for (auto it = std::sregex_iterator(p.output.begin(), p.output.end(), row);
         it != std::sregex_iterator(); ++it) {
      pairs.insert((*it)[1].str() + "/" + (*it)[2].str());
    }
    CHECK(pairs.size() == 50);  // 10 types x 5 ops
    CHECK(pairs.count("bfloat16/avg") == 1);
    CHECK(pairs.count("half/prod") == 1);
    CHECK(pairs.count("int8/sum") == 1);
  }
}

TEST_CASE("-R 1: SharedBuffers through the single-copy ops, checked exactly", "[launcher][bench]") {
  // 256 KiB to 4 MiB: every size takes the mapped path at 2 ranks (a 512 KiB allgather row is
  // a 256 KiB block), and -c checks each result.
  for (const std::string name :
       {"all_reduce_perf", "reduce_scatter_perf", "all_gather_perf", "broadcast_perf"}) {
    const Process p = run_bench(
        2, name, {"-b", "512K", "-e", "4M", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-R", "1"});
    INFO(name << ":\n" << p.output);
    CHECK(shell_status(p) == 0);
    CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
    CHECK(count(p.output, "SharedBuffer]") == 2);  // each rank's device line
    CHECK(table_rows(p.output) == 2);
  }
}

TEST_CASE("-c catches a planted corruption and the run fails", "[launcher][bench]") {
  // Test hook: --test-corrupt-rank R flips one bit of one output element on rank R after each
  // checked op (see docs/architecture.md).
  std::vector<std::string> flags = kShortSweep;
  flags.insert(flags.end(), {"--test-corrupt-rank", "1"});
  const Process p = run_bench(2, "all_reduce_perf", flags);
  INFO(p.output);
  CHECK(shell_status(p) == 1);
  std::smatch m;
  REQUIRE(
      std::regex_search(p.output, m, std::regex(R"(# Out of bounds values : ([0-9]+) FAILED)")));
  CHECK(std::stoi(m[1]) == 8);  // one element, out-of-place and in-place, 4 sizes
  CHECK_THAT(p.output, Catch::Contains("all_reduce_perf: rank 1: out-of-place float sum element"));
  CHECK_THAT(p.output, Catch::Contains("exited with code 1"));
  // The same run without the hook is clean: the check is what failed, not the op.
  const Process clean = run_bench(2, "all_reduce_perf", kShortSweep);
  CHECK(shell_status(clean) == 0);
}

TEST_CASE("every benchmark runs as one process with no launcher at all", "[launcher][bench]") {
  for (const std::string name :
       {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
        "reduce_perf", "alltoall_perf", "sendrecv_perf", "barrier_perf"}) {
    std::vector<std::string> argv{bench_bin(name)};
    argv.insert(argv.end(), kShortSweep.begin(), kShortSweep.end());
    const Process p = run(argv, Seconds(60), {}, launcher_vars());
    INFO(name << ":\n" << p.output);
    CHECK(shell_status(p) == 0);
    CHECK_THAT(p.output, Catch::Contains("launcher none"));
    CHECK_THAT(p.output, Catch::Contains("# nRanks 1 "));
    CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
    CHECK(table_rows(p.output) == (name == "barrier_perf" ? 1 : 4));
  }
}

TEST_CASE("--json writes every row, the parameters and the versions", "[launcher][bench]") {
  char tmpl[] = "/tmp/chorus_bench_json_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::vector<std::string> flags = kShortSweep;
  flags.insert(flags.end(), {"--json", tmpl});
  const Process p = run_bench(2, "broadcast_perf", flags);
  INFO(p.output);
  CHECK(shell_status(p) == 0);
  // Only rank 0 writes the table, so chorusrun passes it through bare, as nccl-tests prints it.
  CHECK_THAT(p.output, Catch::Contains("\n# Collective test starting: broadcast_perf\n"));
  CHECK(count(p.output, "[rank 0]") == 0);
  const std::string json = slurp(tmpl);
  ::unlink(tmpl);
  INFO(json);
  CHECK(json.front() == '{');
  CHECK(json.find("\"benchmark\":\"broadcast_perf\"") != std::string::npos);
  CHECK(json.find("\"chorus_version\":\"") != std::string::npos);
  CHECK(json.find("\"config\":{\"backend\":\"tcp\",\"launcher\":\"chorusrun\",\"nranks\":2") !=
        std::string::npos);
  CHECK(count(json, "\"out_of_place\":{\"time_us\":") == 4);
  CHECK(count(json, "\"in_place\":{\"time_us\":") == 4);
  CHECK(count(json, "\"busbw_gbs\":") == 8);
  CHECK(count(json, "\"median_us\":") == 8);
  CHECK(json.find("\"out_of_bounds\":{\"count\":0,\"okay\":true}") != std::string::npos);
  CHECK(count(json, "{") == count(json, "}"));
  CHECK(count(json, "[") == count(json, "]"));
}

TEST_CASE("--json to a path that cannot be written fails before the sweep, saying why",
          "[launcher][bench]") {
  std::vector<std::string> flags = kShortSweep;
  flags.insert(flags.end(), {"--json", "/nonexistent-chorus-dir/result.json"});
  const Process p = run_bench(2, "all_reduce_perf", flags);
  INFO(p.output);
  CHECK(shell_status(p) == 2);
  CHECK_THAT(p.output,
             Catch::Contains("cannot write the --json file /nonexistent-chorus-dir/result.json: "
                             "No such file or directory"));
  CHECK(table_rows(p.output) == 0);  // nothing was run
}

TEST_CASE("a restarted job gets a fresh group on the same store", "[launcher][bench]") {
  // Attempt 0: rank 1 dies before joining, rank 0 is stopped while it waits for rank 1.
  // Attempt 1: both run the benchmark; the group's keys of attempt 0 must not confuse it.
  std::string sweep;
  for (const auto& f : kShortSweep) {
    sweep += " " + f;
  }
  const std::vector<std::string> argv{
      binary("CHORUSRUN"),
      "--standalone",
      "-n",
      "2",
      "--max-restarts",
      "1",
      "--kill-timeout",
      "5",
      "--",
      "/bin/sh",
      "-c",
      "if [ $CHORUS_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then exit 3; fi; exec " +
          bench_bin("all_reduce_perf") + sweep};
  const Process p = run(argv, Seconds(90), {}, launcher_vars());
  INFO(p.output);
  CHECK(shell_status(p) == 0);
  CHECK_THAT(p.output, Catch::Contains("restarting the local ranks (restart 1 of 1)"));
  CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
}

TEST_CASE("benchmark flag errors", "[launcher][bench]") {
  Process p = run({bench_bin("all_reduce_perf"), "-b", "1X"}, Seconds(30), {}, launcher_vars());
  CHECK(shell_status(p) == 2);
  CHECK_THAT(p.output, Catch::Contains("-b expects a size"));
  p = run_bench(2, "broadcast_perf", {"-r", "5", "-b", "8", "-e", "8"});
  CHECK(shell_status(p) == 2);
  CHECK_THAT(p.output, Catch::Contains("-r 5 is not a rank (world size 2)"));
}

TEST_CASE("Open MPI's mpirun starts all_reduce_perf on 4 ranks over tcp", "[mpirun][.]") {
  if (!on_path("mpirun")) {
    std::puts("SKIP: mpirun (Debian openmpi-bin) is not installed");
    std::exit(77);
  }
  // Our binary is not MPI-linked: mpirun only starts the processes and sets OMPI_COMM_WORLD_*;
  // chorus finds rank 0's store on 127.0.0.1 at a port hashed from the Open MPI job id.
  std::vector<std::string> argv{
      "/usr/bin/env", "mpirun", "--allow-run-as-root",       "--oversubscribe", "--bind-to", "none",
      "-n",           "4",      bench_bin("all_reduce_perf")};
  argv.insert(argv.end(), {"-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-c", "1"});
  const Process p = run(
      argv, Seconds(120),
      {"OMPI_MCA_btl=self,tcp", "OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo"},
      launcher_vars());
  INFO(p.output);
  CHECK(shell_status(p) == 0);
  CHECK_THAT(p.output, Catch::Contains("launcher openmpi"));
  CHECK_THAT(p.output, Catch::Contains("# nRanks 4 "));
  CHECK_THAT(p.output, Catch::Contains("# Out of bounds values : 0 OK"));
  CHECK(table_rows(p.output) == 5);
  CHECK(count(p.output, "#  Rank ") == 4);
}
