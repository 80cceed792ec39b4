// SPDX-License-Identifier: BSD-3-Clause
// launch_info_from_env(): which launcher started us, our rank, and where the store is.
//
// Order of detection (the first family with any variable set wins, so that e.g. mpirun inside
// a Slurm allocation is read as mpirun):
//   RANK / WORLD_SIZE            chorusrun (CHORUS_LAUNCHER=chorusrun), torchrun
//                                (TORCHELASTIC_RUN_ID), or "env" (set by hand)
//   OMPI_COMM_WORLD_*            Open MPI mpirun
//   PMI_RANK / PMI_SIZE          MPICH / Hydra mpiexec (also Intel MPI)
//   SLURM_PROCID                 Slurm srun
//   nothing                      a single process
// The store address rule is in the store_from_*() functions below and in docs/architecture.md.
#include "init/launch_env.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/init.hpp>

#include "core/env.hpp"

namespace chorus::init {

std::optional<HostPort> parse_host_port(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5) {
    return std::nullopt;
  }
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value == 0 || value > 65535) {
    return std::nullopt;
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

std::uint16_t port_from_job_id(std::string_view job_id) noexcept {
  // FNV-1a: stable across processes, compilers and runs (std::hash is not).
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : job_id) {
    h = (h ^ c) * 1099511628211ULL;
  }
  return static_cast<std::uint16_t>(kDerivedPortBase + h % kDerivedPortSpan);
}

std::optional<std::string> first_slurm_host(std::string_view nodelist) {
  const auto end = nodelist.find_first_of(",[");
  if (end == 0 || nodelist.empty()) {
    return std::nullopt;
  }
  if (end == std::string_view::npos || nodelist[end] == ',') {
    return std::string(nodelist.substr(0, end));
  }
  // prefix[first-...]: the first number of the range, with its zero padding.
  const auto close = nodelist.find(']', end);
  if (close == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view range = nodelist.substr(end + 1, close - end - 1);
  const auto stop = range.find_first_of("-,");
  const std::string_view first = range.substr(0, stop);
  if (first.empty() || first.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::string(nodelist.substr(0, end)) + std::string(first);
}

std::optional<int> slurm_tasks_on_node(std::string_view list, int node_index) {
  if (node_index < 0) {
    return std::nullopt;
  }
  int node = 0;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    auto comma = list.find(',', pos);
    if (comma == std::string_view::npos) {
      comma = list.size();
    }
    const std::string_view item = list.substr(pos, comma - pos);
    // "N" or "N(xK)"
    const auto paren = item.find('(');
    const std::string_view count_text = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item[paren + 1] != 'x' || item.back() != ')') {
        return std::nullopt;
      }
      const auto r = env::parse_integer(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r <= 0 || *r > INT_MAX) {
        return std::nullopt;
      }
      repeat = static_cast<int>(*r);
    }
    const auto count = env::parse_integer(count_text);
    if (!count || *count <= 0 || *count > INT_MAX) {
      return std::nullopt;
    }
    if (node_index < node + repeat) {
      return static_cast<int>(*count);
    }
    node += repeat;
    pos = comma + 1;
  }
  return std::nullopt;
}

namespace {

// An integer variable that must be present because a sibling variable says which launcher
// started us.
int require_int(const char* name, long long min, long long max, const char* who,
                const char* because) {
  auto value = env::get_int(name, min, max, who);
  if (!value) {
    throw InvalidArgument(fmt::format(
        "environment variable {} is not set, but {} is; both are set by {}: check the launch "
        "command (or unset {} to run a single process)",
        name, because, who, because));
  }
  return static_cast<int>(*value);
}

int optional_int(const char* name, long long min, long long max, const char* who, int fallback) {
  auto value = env::get_int(name, min, max, who);
  return value ? static_cast<int>(*value) : fallback;
}

void check_rank_below(const char* rank_name, int rank, const char* size_name, int size,
                      const char* who) {
  if (rank >= size) {
    throw InvalidArgument(fmt::format(
        "environment variable {}={} is not below {}={}; both are set by {}: check the launch "
        "command",
        rank_name, rank, size_name, size, who));
  }
}

// CHORUS_STORE_ADDR names a running store: nobody hosts one.
bool store_from_chorus_addr(LaunchInfo& info, const char* who) {
  auto addr = env::get("CHORUS_STORE_ADDR");
  if (!addr) {
    return false;
  }
  auto hp = parse_host_port(*addr);
  if (!hp) {
    throw InvalidArgument(fmt::format(
        "environment variable CHORUS_STORE_ADDR='{}' is not host:port (e.g. 127.0.0.1:29500 or "
        "[::1]:29500); it is set by chorusrun or by hand for a store run with chorus-store ({})",
        *addr, who));
  }
  info.store_host = hp->host;
  info.store_port = hp->port;
  info.store_exists = true;
  info.store_source = "CHORUS_STORE_ADDR";
  return true;
}

// torchrun-style launches: MASTER_ADDR and MASTER_PORT are both required for world size > 1.
void store_from_master(LaunchInfo& info, const char* who) {
  if (store_from_chorus_addr(info, who)) {
    return;
  }
  auto addr = env::get("MASTER_ADDR");
  auto port = env::get_int("MASTER_PORT", 1, 65535, who);
  if (!addr && !port && info.world_size == 1) {
    info.store_source = "in-process (world size 1)";
    return;
  }
  if (!addr || !port) {
    throw InvalidArgument(fmt::format(
        "environment variable {} is not set (RANK={}, WORLD_SIZE={}); {} sets MASTER_ADDR and "
        "MASTER_PORT: when launching by hand, set both to rank 0's host and a free port (or set "
        "CHORUS_STORE_ADDR=host:port of a running chorus-store)",
        addr ? "MASTER_PORT" : "MASTER_ADDR", info.rank, info.world_size, who));
  }
  info.store_host = *addr;
  info.store_port = static_cast<std::uint16_t>(*port);
  info.store_source = "MASTER_ADDR/MASTER_PORT";
  // torchrun's agent already serves PyTorch's own TCPStore on MASTER_PORT; ours goes next door.
  if (info.launcher == "torchrun" && env::get("TORCHELASTIC_USE_AGENT_STORE") == "True") {
    if (*port == 65535) {
      throw InvalidArgument(
          "MASTER_PORT=65535 under torchrun: chorus's store uses MASTER_PORT+1 (torchrun's agent "
          "store holds MASTER_PORT); pick a lower --master-port");
    }
    info.store_port = static_cast<std::uint16_t>(*port + 1);
    info.store_source = "MASTER_ADDR/MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)";
  }
}

// MPI and Slurm launches: MASTER_ADDR/MASTER_PORT override; otherwise 127.0.0.1 on a single
// node (or `multi_node_host` from the launcher) and a port hashed from the job id.
void store_from_job(LaunchInfo& info, const char* who, bool single_node,
                    const std::optional<std::string>& multi_node_host, const std::string& job_id,
                    const std::string& job_id_source) {
  if (store_from_chorus_addr(info, who)) {
    return;
  }
  auto addr = env::get("MASTER_ADDR");
  auto port = env::get_int("MASTER_PORT", 1, 65535, "you (for an MPI or Slurm launch)");
  std::string host_rule;
  if (addr) {
    info.store_host = *addr;
    host_rule = "MASTER_ADDR";
  } else if (single_node) {
    info.store_host = "127.0.0.1";
    host_rule = "127.0.0.1 (single node)";
  } else if (multi_node_host) {
    info.store_host = *multi_node_host;
    host_rule = "first host of the Slurm node list";
  } else {
    throw InvalidArgument(fmt::format(
        "rank {} of {} was started by {} on several nodes, and MASTER_ADDR is not set: export "
        "MASTER_ADDR=<rank 0's host> and MASTER_PORT=<free port> to every rank (mpirun -x "
        "MASTER_ADDR -x MASTER_PORT), or CHORUS_STORE_ADDR=host:port of a running chorus-store",
        info.rank, info.world_size, who));
  }
  std::string port_rule;
  if (port) {
    info.store_port = static_cast<std::uint16_t>(*port);
    port_rule = "MASTER_PORT";
  } else if (!job_id.empty()) {
    info.store_port = port_from_job_id(job_id);
    port_rule = fmt::format("port hashed from {}={}", job_id_source, job_id);
  } else {
    throw InvalidArgument(fmt::format(
        "rank {} of {} was started by {} without a job id to derive the store port from, and "
        "MASTER_PORT is not set: export MASTER_PORT=<free port> to every rank",
        info.rank, info.world_size, who));
  }
  info.store_source = host_rule + ", " + port_rule;
}

// The first variable of `names` that is set, as {value, name}.
std::pair<std::string, std::string> first_set(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto v = env::get(name)) {
      return {*v, name};
    }
  }
  return {};
}

void parse_torchrun_style(LaunchInfo& info) {
  const bool chorusrun = env::get("CHORUS_LAUNCHER") == "chorusrun";
  const bool torchrun = !chorusrun && env::get("TORCHELASTIC_RUN_ID").has_value();
  info.launcher = chorusrun ? "chorusrun" : torchrun ? "torchrun" : "env";
  const char* who = chorusrun ? "chorusrun" : torchrun ? "torchrun" : "torchrun or chorusrun";
  const char* because = env::get("RANK") ? "RANK" : "WORLD_SIZE";
  info.rank = require_int("RANK", 0, INT_MAX - 1, who, because);
  info.world_size = require_int("WORLD_SIZE", 1, kMaxWorldSize, who, because);
  check_rank_below("RANK", info.rank, "WORLD_SIZE", info.world_size, who);
  // Launching by hand often sets only RANK and WORLD_SIZE: then every rank is on one node.
  info.local_world_size = optional_int("LOCAL_WORLD_SIZE", 1, INT_MAX, who, info.world_size);
  info.local_rank = optional_int("LOCAL_RANK", 0, INT_MAX - 1, who,
                                 info.local_world_size == info.world_size ? info.rank : 0);
  check_rank_below("LOCAL_RANK", info.local_rank, "LOCAL_WORLD_SIZE", info.local_world_size, who);
  info.node_rank = optional_int("GROUP_RANK", 0, INT_MAX - 1, who, 0);
  store_from_master(info, who);
}

void parse_openmpi(LaunchInfo& info) {
  const char* who = "Open MPI's mpirun";
  const char* because =
      env::get("OMPI_COMM_WORLD_RANK") ? "OMPI_COMM_WORLD_RANK" : "OMPI_COMM_WORLD_SIZE";
  info.launcher = "openmpi";
  info.rank = require_int("OMPI_COMM_WORLD_RANK", 0, INT_MAX - 1, who, because);
  info.world_size = require_int("OMPI_COMM_WORLD_SIZE", 1, kMaxWorldSize, who, because);
  check_rank_below("OMPI_COMM_WORLD_RANK", info.rank, "OMPI_COMM_WORLD_SIZE", info.world_size, who);
  info.local_rank = require_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, INT_MAX - 1, who, because);
  info.local_world_size = require_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, INT_MAX, who, because);
  check_rank_below("OMPI_COMM_WORLD_LOCAL_RANK", info.local_rank, "OMPI_COMM_WORLD_LOCAL_SIZE",
                   info.local_world_size, who);
  auto [job_id, source] = first_set({"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"});
  if (job_id.empty()) {
    if (auto uri = env::get("OMPI_MCA_orte_hnp_uri")) {
      job_id = uri->substr(0, uri->find(';'));
      source = "OMPI_MCA_orte_hnp_uri";
    }
  }
  store_from_job(info, who, info.local_world_size == info.world_size, std::nullopt, job_id, source);
}

void parse_mpich(LaunchInfo& info) {
  const char* who = "MPICH/Hydra mpiexec";
  const char* because = env::get("PMI_RANK") ? "PMI_RANK" : "PMI_SIZE";
  info.launcher = "mpich";
  info.rank = require_int("PMI_RANK", 0, INT_MAX - 1, who, because);
  info.world_size = require_int("PMI_SIZE", 1, kMaxWorldSize, who, because);
  check_rank_below("PMI_RANK", info.rank, "PMI_SIZE", info.world_size, who);
  info.local_world_size = optional_int("MPI_LOCALNRANKS", 1, INT_MAX, who, -1);
  info.local_rank = optional_int("MPI_LOCALRANKID", 0, INT_MAX - 1, who, -1);
  const bool known_local = info.local_world_size > 0 && info.local_rank >= 0;
  if (known_local) {
    check_rank_below("MPI_LOCALRANKID", info.local_rank, "MPI_LOCALNRANKS", info.local_world_size,
                     who);
  } else {
    info.local_world_size = info.world_size;
    info.local_rank = info.rank;
  }
  auto [job_id, source] = first_set({"PMI_KVSNAME", "PMIX_NAMESPACE", "PMI_JOBID"});
  if (job_id.empty() && info.local_world_size == info.world_size) {
    // Every rank of a one-node Hydra job is a child of the same hydra_pmi_proxy.
    job_id = std::to_string(::getppid());
    source = "the parent process id (hydra_pmi_proxy)";
  }
  store_from_job(info, who, known_local && info.local_world_size == info.world_size, std::nullopt,
                 job_id, source);
}

void parse_slurm(LaunchInfo& info) {
  const char* who = "Slurm's srun";
  info.launcher = "slurm";
  info.rank = require_int("SLURM_PROCID", 0, INT_MAX - 1, who, "SLURM_PROCID");
  const char* size_name = env::get("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  info.world_size = require_int(size_name, 1, kMaxWorldSize, who, "SLURM_PROCID");
  check_rank_below("SLURM_PROCID", info.rank, size_name, info.world_size, who);
  info.local_rank = require_int("SLURM_LOCALID", 0, INT_MAX - 1, who, "SLURM_PROCID");
  info.node_rank = optional_int("SLURM_NODEID", 0, INT_MAX - 1, who, 0);
  const char* nodes_name =
      env::get("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const int nodes = optional_int(nodes_name, 1, INT_MAX, who, 1);
  if (auto tasks = env::get("SLURM_STEP_TASKS_PER_NODE")) {
    auto local = slurm_tasks_on_node(*tasks, info.node_rank);
    if (!local) {
      throw InvalidArgument(fmt::format(
          "environment variable SLURM_STEP_TASKS_PER_NODE='{}' has no entry for SLURM_NODEID={} "
          "(expected a list like 2(x3),1); it is set by {}: check the launch command",
          *tasks, info.node_rank, who));
    }
    info.local_world_size = *local;
  } else {
    info.local_world_size =
        optional_int("SLURM_NTASKS_PER_NODE", 1, INT_MAX, who, nodes == 1 ? info.world_size : 0);
    if (info.local_world_size == 0) {  // unknown: an even spread is the best guess
      info.local_world_size = (info.world_size + nodes - 1) / nodes;
    }
  }
  check_rank_below("SLURM_LOCALID", info.local_rank, "the tasks on this node",
                   info.local_world_size, who);
  std::optional<std::string> first_host;
  auto [nodelist, list_name] =
      first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist.empty()) {
    first_host = first_slurm_host(nodelist);
  }
  std::string job_id;
  std::string source;
  if (auto job = env::get("SLURM_JOB_ID")) {
    job_id = *job + "." + env::get("SLURM_STEP_ID").value_or("0");
    source = "SLURM_JOB_ID.SLURM_STEP_ID";
  }
  store_from_job(info, who, nodes == 1, first_host, job_id, source);
}

}  // namespace

std::string run_id_of(const LaunchInfo& info) {
  if (auto id = env::get("CHORUS_RUN_ID")) {
    return *id;
  }
  std::string id;
  if (info.launcher == "torchrun") {
    id = env::get("TORCHELASTIC_RUN_ID").value_or("");
  } else if (info.launcher == "openmpi") {
    id = first_set({"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}).first;
  } else if (info.launcher == "mpich") {
    id = first_set({"PMI_KVSNAME", "PMIX_NAMESPACE", "PMI_JOBID"}).first;
  } else if (info.launcher == "slurm") {
    if (auto job = env::get("SLURM_JOB_ID")) {
      id = *job + "." + env::get("SLURM_STEP_ID").value_or("0");
    }
  }
  return id.empty() ? "default" : id;
}

std::string shared_store_without_run_id(const LaunchInfo& info) {
  // chorusrun always hosts a private store (and names the run); a store hosted by our own
  // rank 0 (MASTER_ADDR/MASTER_PORT) serves this launch only.
  if (!info.store_exists || info.launcher == "chorusrun" || env::get("CHORUS_RUN_ID")) {
    return {};
  }
  const bool torchrun_default = info.launcher == "torchrun" && info.run_id == "none";
  if (info.run_id != "default" && !torchrun_default) {
    return {};
  }
  return fmt::format(
      "rank {}/{} (launched by {}): CHORUS_STORE_ADDR={}:{} names a store that other jobs may share, "
      "and {}: two such jobs would use the same keys and their ranks could meet. Set CHORUS_RUN_ID "
      "to a value unique to this job and the same on every rank (e.g. CHORUS_RUN_ID=$(uuidgen) "
      "exported to every rank){}",
      info.rank, info.world_size, info.launcher, info.store_host, info.store_port,
      torchrun_default
          ? "TORCHELASTIC_RUN_ID is torchrun's default \"none\""
          : "no run id names this job (no CHORUS_RUN_ID and no job id from a launcher)",
      torchrun_default ? ", or pass torchrun --rdzv-id <unique id>" : "");
}

}  // namespace chorus::init

namespace chorus {

LaunchInfo launch_info_from_env() {
  LaunchInfo info;
  // Validate the CHORUS_* variables we depend on here, where a bad value can be reported.
  (void)env::debug_level();
  (void)env::default_timeout();
  info.restart_count = static_cast<int>(
      env::get_int("CHORUS_RESTART_COUNT", 0, INT_MAX, "chorusrun")
          .value_or(
              env::get_int("TORCHELASTIC_RESTART_COUNT", 0, INT_MAX, "torchrun").value_or(0)));
  info.elastic_join =
      env::get_int("CHORUS_ELASTIC_JOIN", 0, 1, "chorusrun --elastic").value_or(0) == 1;
  if (env::get("RANK") || env::get("WORLD_SIZE")) {
    init::parse_torchrun_style(info);
  } else if (env::get("OMPI_COMM_WORLD_RANK") || env::get("OMPI_COMM_WORLD_SIZE")) {
    init::parse_openmpi(info);
  } else if (env::get("PMI_RANK") || env::get("PMI_SIZE")) {
    init::parse_mpich(info);
  } else if (env::get("SLURM_PROCID")) {
    init::parse_slurm(info);
  } else {
    info.launcher = "none";
    if (!init::store_from_chorus_addr(info, "you (CHORUS_STORE_ADDR)")) {
      info.store_source = "in-process (world size 1)";
    }
  }
  info.run_id = init::run_id_of(info);
  return info;
}

}  // namespace chorus
