// SPDX-License-Identifier: BSD-3-Clause
// init_from_env: build the store and the world group from whatever launched this process
// (chorusrun, torchrun, Open MPI's mpirun, MPICH/Hydra, Slurm's srun, or nothing at all).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/options.hpp>
#include <chorus/process_group.hpp>
#include <chorus/store.hpp>

namespace chorus {

enum class Backend : std::uint8_t { tcp, nccl };
CHORUS_API const char* to_string(Backend backend) noexcept;  // "tcp", "nccl"
// "tcp" or "nccl"; nullopt otherwise.
CHORUS_API std::optional<Backend> parse_backend(std::string_view name) noexcept;

// What the launcher told this process, parsed from the environment (no sockets touched).
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index of this process on its node
  int local_world_size = 1;  // processes on this node
  int node_rank = 0;         // GROUP_RANK (torchrun/chorusrun), else derived or 0
  int restart_count = 0;     // CHORUS_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT, else 0
  // "chorusrun", "torchrun", "env" (RANK/WORLD_SIZE set by hand or another tool), "openmpi",
  // "mpich" (PMI_RANK: MPICH/Hydra, Intel MPI), "slurm", or "none" (a single process).
  std::string launcher = "none";
  // Rendezvous: the TcpStore server's address. Empty host when world_size == 1 and nothing
  // was given (an in-process store is used then).
  std::string store_host;
  std::uint16_t store_port = 0;
  // True if a server already runs there (chorusrun hosts one; CHORUS_STORE_ADDR names one):
  // nobody starts one. False: rank 0 hosts the server at store_host:store_port.
  bool store_exists = false;
  // Which variables or rule gave the store address, for messages ("MASTER_ADDR/MASTER_PORT",
  // "CHORUS_STORE_ADDR", "127.0.0.1 + port from OMPI_MCA_ess_base_jobid" ...).
  std::string store_source;
  // Names this job inside the store, so jobs sharing one long-lived store (CHORUS_STORE_ADDR)
  // never read each other's keys: CHORUS_RUN_ID, else the launcher's job id
  // (TORCHELASTIC_RUN_ID, Open MPI job id, SLURM_JOB_ID.SLURM_STEP_ID, PMI_KVSNAME), else
  // "default".
  std::string run_id = "default";
  // CHORUS_ELASTIC_JOIN=1 (chorusrun --elastic sets it on a rank it restarts): this process
  // joins the running job's world group (join_tcp_group) instead of forming a new one; `rank`
  // is then only the launcher's slot, and the group gives this process a rank of its own.
  bool elastic_join = false;
};

// Parses the launcher variables (see docs/architecture.md for the table and the rendezvous
// rule of each launcher). Reads the environment only; never blocks. Throws InvalidArgument
// naming the variable, its value and the launcher expected to set it when one is missing or
// malformed (e.g. OMPI_COMM_WORLD_RANK set without OMPI_COMM_WORLD_SIZE, RANK >= WORLD_SIZE,
// a non-numeric MASTER_PORT).
CHORUS_API LaunchInfo launch_info_from_env();

struct InitOptions {
  TcpGroupOptions tcp;  // used when backend == tcp
  // Used when backend == nccl. device -1 here means "local_rank" (one GPU per process).
  NcclGroupOptions nccl;
  // Deadline of connecting to the store and of each store call. Unset: CHORUS_TIMEOUT, else
  // kDefaultTimeout.
  std::optional<Duration> store_timeout;
};

// The world as init_from_env builds it.
struct World {
  LaunchInfo launch;
  // The rendezvous store, seen through the prefix "run/<run_id>/attempt<restart_count>/app":
  // the application's keys never collide with the group's, another job's or an earlier
  // attempt's. On rank 0 it may host the server (when the launcher did not): keep it alive
  // until every rank is done with the store.
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> group;
};

// Connects to (or, on rank 0, hosts) the rendezvous store described by `launch`. World size 1
// without an address gives an in-process store. Blocks until connected or the timeout passes
// (TimeoutError naming host:port and the launcher rule that chose it).
CHORUS_API std::shared_ptr<Store> store_from_launch(const LaunchInfo& launch,
                                                    std::optional<Duration> timeout = {});

// launch_info_from_env + store_from_launch + make_tcp_group/make_nccl_group over the whole
// world. Collective: every rank calls it. The group's keys live under
// "run/<run_id>/attempt<restart_count>/group", so a group restarted by chorusrun never reads
// the previous attempt's keys. With launch.elastic_join the process instead waits to be let
// into the running world group (join_tcp_group on that store: the members' grow() admits it;
// tcp only). Throws what those throw.
CHORUS_API World init_world_from_env(Backend backend = Backend::tcp,
                                     const InitOptions& options = {});
// The same, returning only the group (it keeps the store alive).
CHORUS_API std::shared_ptr<ProcessGroup> init_from_env(Backend backend = Backend::tcp,
                                                       const InitOptions& options = {});

}  // namespace chorus
