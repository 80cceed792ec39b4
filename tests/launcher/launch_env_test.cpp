// SPDX-License-Identifier: BSD-3-Clause
// launch_info_from_env(): every launcher's variables, the store address rules, bad values.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include <chorus/errors.hpp>
#include <chorus/init.hpp>

#include "init/launch_env.hpp"

using namespace chorus;

namespace {

// Every variable any launcher family sets, cleared before each case so tests never leak.
const char* const kLaunchVars[] = {"RANK",
                                   "WORLD_SIZE",
                                   "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE",
                                   "GROUP_RANK",
                                   "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "CHORUS_STORE_ADDR",
                                   "CHORUS_LAUNCHER",
                                   "CHORUS_RESTART_COUNT",
                                   "CHORUS_RUN_ID",
                                   "TORCHELASTIC_RESTART_COUNT",
                                   "TORCHELASTIC_RUN_ID",
                                   "TORCHELASTIC_USE_AGENT_STORE",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE",
                                   "OMPI_MCA_ess_base_jobid",
                                   "OMPI_MCA_orte_hnp_uri",
                                   "PMIX_NAMESPACE",
                                   "PMI_RANK",
                                   "PMI_SIZE",
                                   "MPI_LOCALRANKID",
                                   "MPI_LOCALNRANKS",
                                   "PMI_KVSNAME",
                                   "PMI_JOBID",
                                   "SLURM_PROCID",
                                   "SLURM_NTASKS",
                                   "SLURM_NPROCS",
                                   "SLURM_LOCALID",
                                   "SLURM_NODEID",
                                   "SLURM_STEP_NUM_NODES",
                                   "SLURM_NNODES",
                                   "SLURM_STEP_TASKS_PER_NODE",
                                   "SLURM_NTASKS_PER_NODE",
                                   "SLURM_STEP_NODELIST",
                                   "SLURM_JOB_NODELIST",
                                   "SLURM_NODELIST",
                                   "SLURM_JOB_ID",
                                   "SLURM_STEP_ID",
                                   "CHORUS_TIMEOUT",
                                   "CHORUS_DEBUG"};

struct CleanEnv {
  CleanEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    clear();
    for (const auto& [name, value] : vars) {
      ::setenv(name, value, 1);
    }
  }
  ~CleanEnv() { clear(); }
  static void clear() {
    for (const char* v : kLaunchVars) {
      ::unsetenv(v);
    }
  }
};

// The InvalidArgument message of launch_info_from_env() in this environment.
std::string error_of_launch() {
  try {
    (void)launch_info_from_env();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("no launcher: a single process with an in-process store", "[launcher][env]") {
  CleanEnv env({});
  const LaunchInfo info = launch_info_from_env();
  CHECK(info.launcher == "none");
  CHECK(info.rank == 0);
  CHECK(info.world_size == 1);
  CHECK(info.local_rank == 0);
  CHECK(info.local_world_size == 1);
  CHECK(info.store_host.empty());
  CHECK_FALSE(info.store_exists);
  CHECK(info.run_id == "default");
}

TEST_CASE("chorusrun's variables: a hosted store named by CHORUS_STORE_ADDR", "[launcher][env]") {
  CleanEnv env({{"RANK", "5"},
                {"WORLD_SIZE", "8"},
                {"LOCAL_RANK", "1"},
                {"LOCAL_WORLD_SIZE", "4"},
                {"GROUP_RANK", "1"},
                {"MASTER_ADDR", "10.0.0.1"},
                {"MASTER_PORT", "29500"},
                {"CHORUS_STORE_ADDR", "10.0.0.1:29500"},
                {"CHORUS_LAUNCHER", "chorusrun"},
                {"CHORUS_RESTART_COUNT", "2"},
                {"TORCHELASTIC_RESTART_COUNT", "2"}});
  const LaunchInfo info = launch_info_from_env();
  CHECK(info.launcher == "chorusrun");
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(info.local_world_size == 4);
  CHECK(info.node_rank == 1);
  CHECK(info.restart_count == 2);
  CHECK(info.store_host == "10.0.0.1");
  CHECK(info.store_port == 29500);
  CHECK(info.store_exists);
  CHECK(info.store_source == "CHORUS_STORE_ADDR");
}

TEST_CASE("torchrun-style variables: rank 0 hosts at MASTER_ADDR:MASTER_PORT", "[launcher][env]") {
  SECTION("set by hand (env)") {
    CleanEnv env({{"RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", "23456"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.launcher == "env");
    CHECK(info.local_rank == 0);  // defaults: one node
    CHECK(info.local_world_size == 2);
    CHECK_FALSE(info.store_exists);
    CHECK(info.store_host == "127.0.0.1");
    CHECK(info.store_port == 23456);
  }
  SECTION("torchrun: its agent store holds MASTER_PORT, ours goes to MASTER_PORT+1") {
    CleanEnv env({{"RANK", "1"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", "1"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", "29500"},
                  {"TORCHELASTIC_RUN_ID", "job7"},
                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                  {"TORCHELASTIC_RESTART_COUNT", "1"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.launcher == "torchrun");
    CHECK(info.store_port == 29501);
    CHECK(info.restart_count == 1);
    CHECK(info.run_id == "job7");
  }
  SECTION("world size 1 needs no address") {
    CleanEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.world_size == 1);
    CHECK(info.store_host.empty());
  }
  SECTION("CHORUS_RUN_ID names the job in a shared store") {
    CleanEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"CHORUS_RUN_ID", "nightly-42"}});
    CHECK(launch_info_from_env().run_id == "nightly-42");
  }
}

TEST_CASE("torchrun-style variables: missing and malformed values name the variable",
          "[launcher][env]") {
  SECTION("RANK without WORLD_SIZE") {
    CleanEnv env({{"RANK", "0"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("WORLD_SIZE is not set"));
    CHECK_THAT(what, Catch::Contains("torchrun or chorusrun"));
  }
  SECTION("non-numeric RANK") {
    CleanEnv env({{"RANK", "zero"}, {"WORLD_SIZE", "2"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("RANK='zero'"));
  }
  SECTION("RANK not below WORLD_SIZE") {
    CleanEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("RANK=2 is not below WORLD_SIZE=2"));
  }
  SECTION("no MASTER_ADDR for a real world") {
    CleanEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("MASTER_ADDR is not set"));
    CHECK_THAT(what, Catch::Contains("CHORUS_STORE_ADDR"));
  }
  SECTION("MASTER_PORT out of range") {
    CleanEnv env(
        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("MASTER_PORT='70000'"));
  }
  SECTION("malformed CHORUS_STORE_ADDR") {
    CleanEnv env({{"RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"CHORUS_STORE_ADDR", "localhost"},
                  {"CHORUS_LAUNCHER", "chorusrun"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("CHORUS_STORE_ADDR='localhost'"));
    CHECK_THAT(what, Catch::Contains("chorusrun"));
  }
  SECTION("LOCAL_RANK not below LOCAL_WORLD_SIZE") {
    CleanEnv env(
        {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2"));
  }
  SECTION("a bad CHORUS_TIMEOUT is reported here too") {
    CleanEnv env({{"CHORUS_TIMEOUT", "soon"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("CHORUS_TIMEOUT='soon'"));
  }
  SECTION("a RANK with a space, a WORLD_SIZE in hex, a CHORUS_TIMEOUT in hex are refused") {
    for (const auto& [name, value] :
         std::initializer_list<std::pair<const char*, const char*>>{{"RANK", " 1"},
                                                                    {"RANK", "1 "},
                                                                    {"RANK", "+1"},
                                                                    {"WORLD_SIZE", "0x2"},
                                                                    {"CHORUS_TIMEOUT", "0x10"},
                                                                    {"CHORUS_TIMEOUT", " 30s"}}) {
      CleanEnv env(
          {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
      ::setenv(name, value, 1);
      INFO(name << "='" << value << "'");
      CHECK_THAT(error_of_launch(), Catch::Contains(std::string(name) + "='" + value + "'"));
    }
  }
  SECTION("a bad restart count names chorusrun") {
    CleanEnv env({{"CHORUS_RESTART_COUNT", "-1"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("CHORUS_RESTART_COUNT='-1'"));
  }
}

TEST_CASE("Open MPI: OMPI_COMM_WORLD_*, loopback and a port from the job id", "[launcher][env]") {
  SECTION("one node") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                  {"OMPI_MCA_ess_base_jobid", "1917779969"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.launcher == "openmpi");
    CHECK(info.rank == 3);
    CHECK(info.world_size == 4);
    CHECK(info.local_rank == 3);
    CHECK(info.local_world_size == 4);
    CHECK(info.store_host == "127.0.0.1");
    CHECK(info.store_port == init::port_from_job_id("1917779969"));
    CHECK_FALSE(info.store_exists);
    CHECK_THAT(info.store_source, Catch::Contains("OMPI_MCA_ess_base_jobid"));
    CHECK(info.run_id == "1917779969");
  }
  SECTION("the hnp uri when the job id variable is missing") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"OMPI_MCA_orte_hnp_uri", "1917779968.0;tcp://192.0.2.2:54011"}});
    CHECK(launch_info_from_env().store_port == init::port_from_job_id("1917779968.0"));
  }
  SECTION("MASTER_ADDR / MASTER_PORT override the rule") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                  {"MASTER_ADDR", "node1"},
                  {"MASTER_PORT", "4000"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.store_host == "node1");
    CHECK(info.store_port == 4000);
  }
  SECTION("several nodes without MASTER_ADDR") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                  {"OMPI_MCA_ess_base_jobid", "5"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("MASTER_ADDR is not set"));
    CHECK_THAT(what, Catch::Contains("Open MPI"));
  }
  SECTION("missing OMPI_COMM_WORLD_SIZE") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "0"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("OMPI_COMM_WORLD_SIZE is not set"));
    CHECK_THAT(what, Catch::Contains("Open MPI's mpirun"));
  }
  SECTION("malformed OMPI_COMM_WORLD_LOCAL_RANK") {
    CleanEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "x1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK='x1'"));
  }
}

TEST_CASE("MPICH/Hydra: PMI_RANK / PMI_SIZE", "[launcher][env]") {
  SECTION("one node, kvs name as job id") {
    CleanEnv env({{"PMI_RANK", "1"},
                  {"PMI_SIZE", "3"},
                  {"MPI_LOCALRANKID", "1"},
                  {"MPI_LOCALNRANKS", "3"},
                  {"PMI_KVSNAME", "kvs_77_0"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.launcher == "mpich");
    CHECK(info.rank == 1);
    CHECK(info.world_size == 3);
    CHECK(info.local_rank == 1);
    CHECK(info.local_world_size == 3);
    CHECK(info.store_host == "127.0.0.1");
    CHECK(info.store_port == init::port_from_job_id("kvs_77_0"));
  }
  SECTION("bad PMI_SIZE") {
    CleanEnv env({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("PMI_SIZE='0'"));
    CHECK_THAT(what, Catch::Contains("MPICH/Hydra"));
  }
  SECTION("PMI_SIZE without PMI_RANK") {
    CleanEnv env({{"PMI_SIZE", "2"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("PMI_RANK is not set"));
  }
}

TEST_CASE("Slurm: SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID", "[launcher][env]") {
  SECTION("one node: loopback and a port from the job and step") {
    CleanEnv env({{"SLURM_PROCID", "2"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_LOCALID", "2"},
                  {"SLURM_NODEID", "0"},
                  {"SLURM_STEP_NUM_NODES", "1"},
                  {"SLURM_STEP_TASKS_PER_NODE", "4"},
                  {"SLURM_JOB_ID", "812"},
                  {"SLURM_STEP_ID", "3"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.launcher == "slurm");
    CHECK(info.rank == 2);
    CHECK(info.world_size == 4);
    CHECK(info.local_rank == 2);
    CHECK(info.local_world_size == 4);
    CHECK(info.store_host == "127.0.0.1");
    CHECK(info.store_port == init::port_from_job_id("812.3"));
    CHECK(info.run_id == "812.3");
  }
  SECTION("several nodes: the first host of the step's node list") {
    CleanEnv env({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "7"},
                  {"SLURM_LOCALID", "0"},
                  {"SLURM_NODEID", "2"},
                  {"SLURM_STEP_NUM_NODES", "4"},
                  {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                  {"SLURM_STEP_NODELIST", "gpu[07-10]"},
                  {"SLURM_JOB_ID", "812"}});
    const LaunchInfo info = launch_info_from_env();
    CHECK(info.local_world_size == 2);
    CHECK(info.node_rank == 2);
    CHECK(info.store_host == "gpu07");
  }
  SECTION("missing SLURM_LOCALID") {
    CleanEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
    const std::string what = error_of_launch();
    CHECK_THAT(what, Catch::Contains("SLURM_LOCALID is not set"));
    CHECK_THAT(what, Catch::Contains("Slurm's srun"));
  }
  SECTION("malformed tasks per node") {
    CleanEnv env({{"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "2"},
                  {"SLURM_LOCALID", "0"},
                  {"SLURM_NODEID", "0"},
                  {"SLURM_STEP_TASKS_PER_NODE", "two"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("SLURM_STEP_TASKS_PER_NODE='two'"));
  }
  SECTION("SLURM_PROCID beyond SLURM_NTASKS") {
    CleanEnv env({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
    CHECK_THAT(error_of_launch(), Catch::Contains("SLURM_PROCID=4 is not below SLURM_NTASKS=4"));
  }
}

TEST_CASE("precedence: RANK over mpirun over Slurm", "[launcher][env]") {
  CleanEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                {"OMPI_MCA_ess_base_jobid", "9"},
                {"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "1"},
                {"SLURM_LOCALID", "0"}});
  CHECK(launch_info_from_env().launcher == "openmpi");
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  CHECK(launch_info_from_env().launcher == "env");
}

TEST_CASE("helpers: host:port, hostlists, tasks per node, derived ports", "[launcher][env]") {
  auto hp = init::parse_host_port("127.0.0.1:29500");
  REQUIRE(hp);
  CHECK(hp->host == "127.0.0.1");
  CHECK(hp->port == 29500);
  hp = init::parse_host_port("[::1]:80");
  REQUIRE(hp);
  CHECK(hp->host == "::1");
  CHECK_FALSE(init::parse_host_port("host"));
  CHECK_FALSE(init::parse_host_port("host:0"));
  CHECK_FALSE(init::parse_host_port("host:99999"));
  CHECK_FALSE(init::parse_host_port(":80"));
  CHECK_FALSE(init::parse_host_port("[::1]80"));

  CHECK(init::first_slurm_host("node[03-05,9],gpu7") == "node03");
  CHECK(init::first_slurm_host("gpu7,gpu8") == "gpu7");
  CHECK(init::first_slurm_host("single") == "single");
  CHECK_FALSE(init::first_slurm_host("node[x]"));
  CHECK_FALSE(init::first_slurm_host(""));

  CHECK(init::slurm_tasks_on_node("2(x3),1", 0) == 2);
  CHECK(init::slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(init::slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK_FALSE(init::slurm_tasks_on_node("2(x3),1", 4));
  CHECK_FALSE(init::slurm_tasks_on_node("2(3)", 0));

  const auto a = init::port_from_job_id("1917779969");
  CHECK(a == init::port_from_job_id("1917779969"));  // stable
  CHECK(a >= init::kDerivedPortBase);
  CHECK(a < init::kDerivedPortBase + init::kDerivedPortSpan);
  CHECK(a != init::port_from_job_id("1917779970"));
}

TEST_CASE("backend names", "[launcher][env]") {
  CHECK(parse_backend("tcp") == Backend::tcp);
  CHECK(parse_backend("nccl") == Backend::nccl);
  CHECK_FALSE(parse_backend("gloo"));
  CHECK(std::string(to_string(Backend::nccl)) == "nccl");
}

TEST_CASE("init_from_env with no launcher builds a world of one", "[launcher][env][init]") {
  CleanEnv env({});
  World world = init_world_from_env(Backend::tcp);
  REQUIRE(world.group);
  CHECK(world.group->size() == 1);
  CHECK(world.group->rank() == 0);
  CHECK(world.launch.launcher == "none");
  world.store->set("k", std::string("v"));
  CHECK(world.store->get_string("k") == "v");
}

TEST_CASE("a huge WORLD_SIZE is refused while parsing, before anything is sized by it",
          "[launcher][env]") {
  CleanEnv env({{"RANK", "0"},
                {"WORLD_SIZE", "2000000000"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", "29500"}});
  CHECK_THAT(error_of_launch(), Catch::Contains("WORLD_SIZE"));
  ::setenv("WORLD_SIZE", std::to_string(init::kMaxWorldSize).c_str(), 1);
  CHECK(launch_info_from_env().world_size == init::kMaxWorldSize);
}

TEST_CASE("a shared store without a run id is refused; launchers that name the run are not",
          "[launcher][env][run_id]") {
  SECTION("RANK/WORLD_SIZE by hand + CHORUS_STORE_ADDR, no run id: refused, saying what to set") {
    CleanEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"CHORUS_STORE_ADDR", "127.0.0.1:29500"}});
    const std::string why = init::shared_store_without_run_id(launch_info_from_env());
    CHECK_THAT(why, Catch::Contains("CHORUS_STORE_ADDR=127.0.0.1:29500") &&
                        Catch::Contains("CHORUS_RUN_ID") && Catch::Contains("rank 1/2"));
    // init_world_from_env refuses before it connects to anything.
    CHECK_THROWS_WITH(init_world_from_env(Backend::tcp), Catch::Contains("Set CHORUS_RUN_ID"));
  }
  SECTION("torchrun's default rdzv id \"none\" is no name either") {
    CleanEnv env({{"RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"CHORUS_STORE_ADDR", "127.0.0.1:29500"},
                  {"TORCHELASTIC_RUN_ID", "none"}});
    CHECK_THAT(init::shared_store_without_run_id(launch_info_from_env()),
               Catch::Contains("--rdzv-id"));
  }
  SECTION("allowed: CHORUS_RUN_ID, a launcher's job id, chorusrun, or a store our rank 0 hosts") {
    {
      CleanEnv env({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"CHORUS_STORE_ADDR", "127.0.0.1:29500"},
                    {"CHORUS_RUN_ID", "nightly-42"}});
      CHECK(init::shared_store_without_run_id(launch_info_from_env()).empty());
    }
    {
      CleanEnv env({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"CHORUS_STORE_ADDR", "127.0.0.1:29500"},
                    {"TORCHELASTIC_RUN_ID", "job7"}});
      CHECK(init::shared_store_without_run_id(launch_info_from_env()).empty());
    }
    {
      CleanEnv env({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"CHORUS_STORE_ADDR", "127.0.0.1:29500"},
                    {"CHORUS_LAUNCHER", "chorusrun"}});
      CHECK(init::shared_store_without_run_id(launch_info_from_env()).empty());
    }
    {
      CleanEnv env({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", "29500"}});
      CHECK(init::shared_store_without_run_id(launch_info_from_env()).empty());
    }
    {
      CleanEnv env({{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_JOB_ID", "812"},
                    {"CHORUS_STORE_ADDR", "127.0.0.1:29500"}});
      CHECK(init::shared_store_without_run_id(launch_info_from_env()).empty());
    }
  }
}
