// SPDX-License-Identifier: BSD-3-Clause
// init_from_env(): the rendezvous store and the world group, from the launcher's variables.
#include <chorus/init.hpp>

#include <string>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "core/env.hpp"
#include "core/logging.hpp"
#include "init/launch_env.hpp"

namespace chorus {

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::tcp:
      return "tcp";
    case Backend::nccl:
      return "nccl";
  }
  return "?";
}

std::optional<Backend> parse_backend(std::string_view name) noexcept {
  if (name == "tcp") {
    return Backend::tcp;
  }
  if (name == "nccl") {
    return Backend::nccl;
  }
  return std::nullopt;
}

std::shared_ptr<Store> store_from_launch(const LaunchInfo& launch,
                                         std::optional<Duration> timeout) {
  // One process with no store named: nothing to rendezvous with, so no port is bound.
  if (launch.world_size == 1 && !launch.store_exists) {
    return make_hash_store(timeout);
  }
  const bool host_server = !launch.store_exists && launch.rank == 0;
  TcpStoreOptions options{.host = launch.store_host,
                          .port = launch.store_port,
                          .is_server = host_server,
                          .timeout = timeout};
  CHORUS_INFO(init, "rank {}/{} ({}): {} the store at {}:{} ({})", launch.rank, launch.world_size,
              launch.launcher, host_server ? "hosting" : "connecting to", launch.store_host,
              launch.store_port, launch.store_source);
  try {
    return std::make_shared<TcpStore>(options);
  } catch (const Error& e) {
    // Say which launcher rule picked the address: that is what the user can change.
    throw_error(e.code(),
                fmt::format("{} [rank {}/{} launched by {}; store address from {}]", e.what(),
                            launch.rank, launch.world_size, launch.launcher, launch.store_source),
                e.context());
  }
}

World init_world_from_env(Backend backend, const InitOptions& options) {
  World world;
  world.launch = launch_info_from_env();
  const LaunchInfo& launch = world.launch;
  if (const std::string unsafe = init::shared_store_without_run_id(launch); !unsafe.empty()) {
    throw InvalidArgument(unsafe);
  }
  // A store hosted by chorusrun survives restarts, and one run by chorus-store may serve many
  // jobs: each job and attempt gets its own key space, split between the group and the app.
  auto base = store_from_launch(launch, options.store_timeout);
  auto scoped = make_prefix_store(
      fmt::format("run/{}/attempt{}", launch.run_id, launch.restart_count), std::move(base));
  world.store = make_prefix_store("app", scoped);
  auto group_store = make_prefix_store("group", scoped);
  if (launch.elastic_join) {
    if (backend != Backend::tcp || !launch.store_exists) {
      throw InvalidArgument(fmt::format(
          "CHORUS_ELASTIC_JOIN=1 on rank {}: joining a running job needs the tcp backend and the "
          "job's store (CHORUS_STORE_ADDR, as chorusrun --elastic sets it); got backend {} and "
          "the store from {}",
          launch.rank, to_string(backend), launch.store_source));
    }
    world.group = join_tcp_group(group_store, options.tcp);
    return world;
  }
  switch (backend) {
    case Backend::tcp:
      world.group = make_tcp_group(group_store, launch.rank, launch.world_size, options.tcp);
      break;
    case Backend::nccl: {
      NcclGroupOptions nccl = options.nccl;
      if (nccl.device < 0) {
        nccl.device = launch.local_rank;  // one GPU per process, in local rank order
      }
      world.group = make_nccl_group(group_store, launch.rank, launch.world_size, nccl);
      break;
    }
  }
  return world;
}

std::shared_ptr<ProcessGroup> init_from_env(Backend backend, const InitOptions& options) {
  return init_world_from_env(backend, options).group;
}

}  // namespace chorus
