// SPDX-License-Identifier: BSD-3-Clause
// Launcher detection: pure helpers behind launch_info_from_env(), exposed for unit tests.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::init {

// The largest world size a launcher variable may give: checked while parsing, before anything
// is sized by it (a typo like WORLD_SIZE=2000000000 is an error, not an allocation).
inline constexpr int kMaxWorldSize = 1 << 20;

// "host:port", "[v6]:port" or "v6addr:port" (last colon); nullopt if malformed or port 0.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};
std::optional<HostPort> parse_host_port(std::string_view text);

// The port derived from a job id when the launcher gives no MASTER_PORT: a stable hash into
// [kDerivedPortBase, kDerivedPortBase + kDerivedPortSpan), below the usual ephemeral range
// (32768+) so that it rarely collides with a connection's local port.
inline constexpr std::uint16_t kDerivedPortBase = 20000;
inline constexpr std::uint16_t kDerivedPortSpan = 12000;
std::uint16_t port_from_job_id(std::string_view job_id) noexcept;

// First host of a Slurm hostlist: "node[03-05,9],gpu7" -> "node03"; nullopt if malformed.
std::optional<std::string> first_slurm_host(std::string_view nodelist);

// Tasks on node `node_index` from SLURM_STEP_TASKS_PER_NODE ("2(x3),1" = 2,2,2,1); nullopt if
// malformed or the index is past the list.
std::optional<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node_index);

}  // namespace chorus::init

namespace chorus {
struct LaunchInfo;
namespace init {
// LaunchInfo::run_id for a parsed launch (CHORUS_RUN_ID, else the launcher's job id).
std::string run_id_of(const LaunchInfo& info);

// Why this launch must not use its store as it is, or "" if it may: a store named by
// CHORUS_STORE_ADDR (one that other jobs may share) with no run id that is unique to this
// launch ("default", or torchrun's default rdzv id "none"). Two such jobs would share key
// names; init_from_env refuses instead of letting their ranks meet.
std::string shared_store_without_run_id(const LaunchInfo& info);
}  // namespace init
}  // namespace chorus
