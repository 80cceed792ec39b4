// SPDX-License-Identifier: BSD-3-Clause
// examples/elastic_train under chorusrun --elastic: ranks SIGKILLed at step 20 of 60 (one, rank
// 0, two at once) or SIGSTOPped there, and with --max-restarts 1 a killed rank that comes back
// as a joiner; the job exits 0, every step appears once, with the world size before and after
// (and again after the rejoin), and the final parameters equal a single process's training;
// over two nodes, a node whose chorusrun is SIGKILLed loses its ranks together; a process
// started by hand with the store address, run id and token joins a running job
// (elastic_model.hpp), which is what a run of the survivors from the state after step 19 gives
// too: the gradient does not depend on the world size. Run by the chorusrun_elastic test.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../../examples/elastic_model.hpp"
#include "spawn.hpp"
#include "support/held_port.hpp"

using namespace launcher_test;

// The grace (--grace-ms) is long where the dead are named by the failure: it then costs nothing,
// and a survivor slowed by a busy machine is never taken for a late rank. Two ranks killed at
// once wait out the default grace (the failure names one): that case takes 2 s more.

namespace {

constexpr int kSteps = 60;
constexpr int kFailAt = 20;

std::vector<std::string> elastic_job(const std::vector<std::string>& train_args,
                                     const std::vector<std::string>& launcher_args = {}) {
  std::vector<std::string> argv{binary("CHORUSRUN"), "--elastic"};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  const std::vector<std::string> rest{"--standalone",
                                      "-n",
                                      "4",
                                      std::string(std::getenv("EXAMPLES_DIR")) + "/elastic_train",
                                      "--steps",
                                      std::to_string(kSteps)};
  argv.insert(argv.end(), rest.begin(), rest.end());
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  return argv;
}

// The world size printed for each step; every step from 1 to kSteps exactly once.
std::map<int, int> worlds_of(const std::string& output) {
  std::map<int, std::vector<int>> worlds;  // step -> the world sizes printed for it
  const std::regex step_re("step ([0-9]+) world ([0-9]+) loss ");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), step_re);
       it != std::sregex_iterator(); ++it) {
    worlds[std::stoi((*it)[1])].push_back(std::stoi((*it)[2]));
  }
  std::map<int, int> once;
  for (int step = 1; step <= kSteps; ++step) {
    INFO("step " << step);
    REQUIRE(worlds[step].size() == 1);
    once[step] = worlds[step][0];
  }
  CHECK(worlds.size() == static_cast<std::size_t>(kSteps));
  return once;
}

// "final" equal to the reference (the survivors' run from the state after step 19).
void check_final(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex("final ([-0-9.e+]+)")));
  const double final_sum = std::stod(m[1]);
  const double want = elastic::sum(elastic::reference(kSteps));
  CHECK(std::abs(final_sum - want) <= 1e-6 * std::abs(want));
}

// World 4 before kFailAt and `after` from it.
void check_run(const std::string& output, int after) {
  for (const auto& [step, world] : worlds_of(output)) {
    INFO("step " << step);
    CHECK(world == (step < kFailAt ? 4 : after));
  }
  check_final(output);
}

// World 4 before kFailAt, 3 at kFailAt, 4 again from some later step on.
void check_rejoined(const std::string& output) {
  int back_at = 0;
  for (const auto& [step, world] : worlds_of(output)) {
    INFO("step " << step);
    if (step < kFailAt) {
      CHECK(world == 4);
    } else if (step == kFailAt) {
      CHECK(world == 3);
    } else if (world == 4 && back_at == 0) {
      back_at = step;
    } else {
      CHECK(world == (back_at == 0 ? 3 : 4));
    }
  }
  CHECK(back_at > kFailAt);
  check_final(output);
}

// What is wrong with the printed steps: each of 1..steps once, in order; "" if nothing.
std::string step_sequence_problems(const std::string& output, int steps) {
  std::vector<int> order;
  const std::regex step_re("step ([0-9]+) world [0-9]+ loss ");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), step_re);
       it != std::sregex_iterator(); ++it) {
    order.push_back(std::stoi((*it)[1]));
  }
  std::string problems;
  int want = 1;
  for (int step : order) {
    if (step != want) {
      problems +=
          "step " + std::to_string(step) + " printed where " + std::to_string(want) + " was due; ";
    }
    want = step + 1;
  }
  if (want != steps + 1) {
    problems += "the last step printed is " + std::to_string(want - 1) + "; ";
  }
  return problems;
}

// `output` without its step lines (what a failed check shows).
std::string without_steps(const std::string& output) {
  return std::regex_replace(output, std::regex("[^\n]*step [0-9]+ world [0-9]+ loss [^\n]*\n"), "");
}

}  // namespace

TEST_CASE("elastic_train under chorusrun --elastic: SIGKILLed ranks, the job goes on",
          "[.elastic]") {
  SECTION("rank 2") {
    const Process p = run(elastic_job({"--kill-at", "2:20", "--grace-ms", "10000"}), Seconds(60),
                          {}, launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    check_run(p.output, 3);
  }
  SECTION("rank 0, the printing rank") {
    const Process p = run(elastic_job({"--kill-at", "0:20", "--grace-ms", "10000"}), Seconds(60),
                          {}, launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    check_run(p.output, 3);
  }
  SECTION("ranks 1 and 3 at once") {
    const Process p = run(elastic_job({"--kill-at", "1:20", "--kill-at", "3:20"}), Seconds(60), {},
                          launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    check_run(p.output, 2);
  }
}

TEST_CASE(
    "elastic_train under chorusrun --elastic: a rank SIGKILLed at a random moment loses "
    "no step and prints none twice",
    "[.elastic]") {
  // Many fast steps (no --step-ms) and a kill from another thread of the victim, a seeded
  // random time after its first step: wherever it lands (in an allreduce, between the op and
  // the print, at the step boundary, in the recovery or the last barrier), every step is
  // printed once, in order, and the final value is right. The printing rank is the victim in
  // most runs.
  constexpr int kRuns = 8;
  constexpr int kFastSteps = 2000;
  std::mt19937 random(50);
  std::uniform_int_distribution<int> delay_us(0, 40000);
  const double want = elastic::sum(elastic::reference(kFastSteps));
  int changed_world = 0;
  for (int run_index = 0; run_index < kRuns; ++run_index) {
    const int victim = run_index % 4 == 3 ? 1 + run_index % 2 : 0;
    const int delay = delay_us(random);
    const std::vector<std::string> argv{binary("CHORUSRUN"),
                                        "--elastic",
                                        "--standalone",
                                        "-n",
                                        "3",
                                        std::string(std::getenv("EXAMPLES_DIR")) + "/elastic_train",
                                        "--steps",
                                        std::to_string(kFastSteps),
                                        "--grace-ms",
                                        "3000",
                                        "--kill-after-us",
                                        std::to_string(victim) + ":" + std::to_string(delay)};
    const Process p = run(argv, Seconds(60), {}, launcher_vars());
    INFO("run " << run_index << ": rank " << victim << " killed " << delay << " us after step 1\n"
                << without_steps(p.output));
    CHECK(shell_status(p) == 0);
    CHECK(step_sequence_problems(p.output, kFastSteps).empty());
    std::smatch m;
    REQUIRE(std::regex_search(p.output, m, std::regex("final ([-0-9.e+]+)")));
    CHECK(std::abs(std::stod(m[1]) - want) <= 1e-6 * std::abs(want));
    if (p.output.find("world 2 loss") != std::string::npos) {
      ++changed_world;
    }
  }
  // Most kills land before the job ends (the rest in its last barrier, or after it).
  WARN(changed_world << " of " << kRuns << " runs went on in a world of 2");
}

TEST_CASE(
    "elastic_train under chorusrun --elastic: the printing rank SIGKILLed between a step's "
    "allreduce and its line",
    "[.elastic]") {
  // The others completed the step too (their allreduce had what it needed) and go on from the
  // next one: the survivors' agreement prints the step, with the world that computed it.
  const Process p = run(elastic_job({"--kill-after-op", "0:20", "--grace-ms", "10000"}),
                        Seconds(60), {}, launcher_vars());
  INFO(p.output);
  CHECK(shell_status(p) == 0);
  for (const auto& [step, world] : worlds_of(p.output)) {
    INFO("step " << step);
    if (step != kFailAt) {
      CHECK(world == (step < kFailAt ? 4 : 3));
    } else {  // 4 when the others completed it, 3 when they computed it again
      CHECK((world == 4 || world == 3));
    }
  }
  check_final(p.output);
}

TEST_CASE("elastic_train under chorusrun --elastic: a SIGSTOPped rank is fenced out",
          "[.elastic]") {
  // Named by the peer timeout (3 s), so nobody waits for it; woken once the others are done,
  // it finds itself fenced out and exits 3, which the job tolerates (3 ranks finished).
  Process p = start(elastic_job({"--stop-at", "2:20", "--grace-ms", "10000"}),
                    {"CHORUS_PEER_TIMEOUT=3s"}, launcher_vars());
  REQUIRE(read_until(p, "final ", 1, Seconds(60)));
  std::smatch m;
  REQUIRE(std::regex_search(p.output, m, std::regex("stopping pid ([0-9]+)")));
  ::kill(static_cast<pid_t>(std::stol(m[1])), SIGCONT);
  REQUIRE(finish(p, Seconds(60)));
  INFO(p.output);
  CHECK(shell_status(p) == 0);
  CHECK_THAT(p.output, Catch::Contains("fenced out"));
  CHECK_THAT(p.output, Catch::Contains("--elastic: 3 rank(s) finished, 1 lost on the way"));
  check_run(p.output, 3);
}

TEST_CASE("elastic_train under chorusrun --elastic --max-restarts 1: the killed rank comes back",
          "[.elastic]") {
  // The replacement joins at the step boundary after the shrink, which waits for it
  // (--rejoin-wait-ms); steps take 20 ms, as if there were a model to compute.
  const std::vector<std::string> pace{"--step-ms", "20",         "--rejoin-wait-ms",
                                      "30000",     "--grace-ms", "10000"};
  SECTION("rank 2") {
    std::vector<std::string> args{"--kill-at", "2:20"};
    args.insert(args.end(), pace.begin(), pace.end());
    const Process p =
        run(elastic_job(args, {"--max-restarts", "1"}), Seconds(90), {}, launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    CHECK_THAT(p.output, Catch::Contains("restarting it as a joiner of the running job"));
    CHECK_THAT(p.output, Catch::Contains("elastic_train: rank 2 joined as rank 3/4 after step 20"));
    check_rejoined(p.output);
  }
  SECTION("rank 0, the printing rank") {
    std::vector<std::string> args{"--kill-at", "0:20"};
    args.insert(args.end(), pace.begin(), pace.end());
    const Process p =
        run(elastic_job(args, {"--max-restarts", "1"}), Seconds(90), {}, launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 0);
    CHECK_THAT(p.output, Catch::Contains("elastic_train: rank 0 joined as rank 3/4 after step 20"));
    check_rejoined(p.output);
  }
}

TEST_CASE("elastic_train under chorusrun --elastic --nnodes 2: a lost node's ranks leave together",
          "[.elastic]") {
  const chorus::test::HeldLoopbackPort held;
  const std::string port = std::to_string(held.port());
  auto node = [&](const char* node_rank) {
    return start({binary("CHORUSRUN"), "--elastic", "--nnodes", "2", "--node-rank", node_rank, "-n",
                  "2", "--master-addr", "127.0.0.1", "--master-port", port,
                  std::string(std::getenv("EXAMPLES_DIR")) + "/elastic_train", "--steps",
                  std::to_string(kSteps), "--step-ms", "20", "--grace-ms", "10000"},
                 {"CHORUS_STORE_TOKEN=elastic-test-token-0123456789"}, launcher_vars());
  };
  SECTION("nothing fails: both nodes finish, world 4 throughout") {
    Process first = node("0");
    Process second = node("1");
    REQUIRE(finish(first, Seconds(60)));
    REQUIRE(finish(second, Seconds(60)));
    INFO(first.output << "\n----- node 1 -----\n" << second.output);
    CHECK(shell_status(first) == 0);
    CHECK(shell_status(second) == 0);
    for (const auto& [step, world] : worlds_of(first.output)) {
      CHECK(world == 4);
    }
    check_final(first.output);
    CHECK_THAT(first.output, Catch::Contains("the job is done: every node finished"));
  }
  SECTION("node 1's chorusrun is SIGKILLed: its two ranks die with it, node 0's go on") {
    Process first = node("0");
    Process second = node("1");
    REQUIRE(read_until(first, "step 10 world 4", 1, Seconds(60)));
    ::kill(second.pid, SIGKILL);
    REQUIRE(finish(first, Seconds(60)));
    REQUIRE(finish(second, Seconds(10)));
    INFO(first.output);
    CHECK(shell_status(first) == 0);
    int shrunk_at = 0;
    for (const auto& [step, world] : worlds_of(first.output)) {
      INFO("step " << step);
      if (world == 2 && shrunk_at == 0) {
        shrunk_at = step;
      }
      CHECK(world == (shrunk_at == 0 ? 4 : 2));
    }
    CHECK(shrunk_at > 10);
    check_final(first.output);
    CHECK_THAT(first.output, Catch::Contains("(node 1 went silent)"));
  }
}

TEST_CASE(
    "a process started by hand joins a running elastic_train with the store address, run id "
    "and token only",
    "[.elastic]") {
  const chorus::test::HeldLoopbackPort held;
  const std::string port = std::to_string(held.port());
  const std::string token = "by-hand-joiner-test-token-0123456789";
  // No launcher variables for the joiner: CHORUS_STORE_ADDR, CHORUS_RUN_ID, CHORUS_STORE_TOKEN
  // and CHORUS_ELASTIC_JOIN=1 are all it is given.
  const std::vector<std::string> job_env{"CHORUS_RUN_ID=by-hand-join",
                                         "CHORUS_STORE_TOKEN=" + token};
  const std::string train = std::string(std::getenv("EXAMPLES_DIR")) + "/elastic_train";
  Process job = start(
      {binary("CHORUSRUN"), "--elastic", "--nnodes", "1", "-n", "3", "--master-addr", "127.0.0.1",
       "--master-port", port, train, "--steps", std::to_string(kSteps), "--step-ms", "50"},
      job_env, launcher_vars());
  REQUIRE(read_until(job, "step 2 world 3", 1, Seconds(60)));
  std::vector<std::string> joiner_env = job_env;
  joiner_env.push_back("CHORUS_STORE_ADDR=127.0.0.1:" + port);
  joiner_env.push_back("CHORUS_ELASTIC_JOIN=1");
  const Process joiner =
      run({train, "--steps", std::to_string(kSteps)}, Seconds(60), joiner_env, launcher_vars());
  REQUIRE(finish(job, Seconds(60)));
  INFO(job.output << "\n----- joiner -----\n" << joiner.output);
  CHECK(shell_status(job) == 0);
  CHECK(shell_status(joiner) == 0);
  CHECK_THAT(joiner.output, Catch::Contains("joined as rank 3/4"));
  int grown_at = 0;
  for (const auto& [step, world] : worlds_of(job.output)) {
    INFO("step " << step);
    if (world == 4 && grown_at == 0) {
      grown_at = step;
    }
    CHECK(world == (grown_at == 0 ? 3 : 4));
  }
  CHECK(grown_at > 2);
  check_final(job.output);
}

TEST_CASE(
    "elastic_train started by hand with no token, a wrong token or no store exits 1 with "
    "its message, never through std::terminate",
    "[.elastic]") {
  const std::string train = std::string(std::getenv("EXAMPLES_DIR")) + "/elastic_train";
  const chorus::test::HeldLoopbackPort held;
  const std::string port = std::to_string(held.port());
  const std::string address = "127.0.0.1:" + port;
  const std::vector<std::string> joiner{"CHORUS_STORE_ADDR=" + address, "CHORUS_RUN_ID=setup",
                                        "CHORUS_ELASTIC_JOIN=1", "CHORUS_TIMEOUT=2s"};
  Process store = start({binary("CHORUS_STORE_BIN"), "--host", "127.0.0.1", "--port", port},
                        {"CHORUS_STORE_TOKEN=setup-error-test-token-0123456789"}, launcher_vars());
  REQUIRE(read_until(store, "listening", 1, Seconds(30)));
  auto check_setup_error = [&](const std::vector<std::string>& env, const char* says) {
    const Process p = run({train, "--steps", "3"}, Seconds(60), env, launcher_vars());
    INFO(p.output);
    CHECK(shell_status(p) == 1);
    CHECK_THAT(p.output, Catch::Contains("elastic_train: ") && Catch::Contains(says));
    CHECK_THAT(p.output, !Catch::Contains("terminate called"));
  };
  std::vector<std::string> no_token = joiner;
  check_setup_error(no_token, "requires a job token");
  std::vector<std::string> wrong_token = joiner;
  wrong_token.push_back("CHORUS_STORE_TOKEN=not-the-job-token-0123456789");
  check_setup_error(wrong_token, "refused this process's job token");
  ::kill(store.pid, SIGTERM);
  REQUIRE(finish(store, Seconds(30)));
  check_setup_error(no_token, "could not connect to the store server");
}
