// SPDX-License-Identifier: BSD-3-Clause
// GroupBuilder: forming a CPU group, step by step (see group_builder.hpp).
#include "cpu/group_builder.hpp"

#include <algorithm>

#include "core/check.hpp"
#include "core/env.hpp"
#include "core/wire.hpp"
#include "cpu/bootstrap/host_id.hpp"
#include "cpu/transports/socket/network_probe.hpp"

namespace chorus::cpu {

GroupBuilder::GroupBuilder(Store& store, GroupIdentity id, const TcpGroupOptions& options,
                           std::optional<detail::Formation> formation)
    : store_(store), id_(std::move(id)), options_(options), formation_(std::move(formation)) {}

FormedGroup GroupBuilder::form() {
  read_environment();
  connect_mesh();
  agree_link_costs();
  build_stack();
  return std::move(formed_);
}

void GroupBuilder::read_environment() {
  if (const auto algo = env::get("CHORUS_ALGO")) {
    formed_.forced = parse_algorithm_overrides(*algo);
  }
  const std::optional<DataType> wire =
      options_.wire_dtype ? options_.wire_dtype : env::wire_dtype();
  check_arg(!wire || *wire == DataType::bfloat16 || *wire == DataType::float16 ||
                *wire == DataType::float32,
            "tcp group [{}]: TcpGroupOptions::wire_dtype is {}; a wire is bfloat16, float16 "
            "(for float32 data) or float32 (for float64 data)",
            id_.name, wire ? to_string(*wire) : "unset");
  formed_.wire_default = wire;
}

MeshOptions GroupBuilder::mesh_options() {
  std::optional<detail::Formation> formation = std::move(formation_);
  MeshOptions mo;
  mo.rank = id_.rank;
  mo.size = id_.size;
  mo.sockets_per_peer = options_.sockets_per_peer;
  mo.local_send_buffer = options_.local_send_buffer_bytes;
  mo.interface = options_.interface;
  mo.group_name = id_.name;
  mo.timeout = id_.timeout;
  mo.deadline = Deadline::after(formation ? formation->bound : id_.timeout);
  if (formation) {
    mo.formation_bound = formation->bound;
    mo.give_up = std::move(formation->give_up);
  }
  mo.hello_timeout = options_.hello_timeout;
  mo.peer_timeout = env::resolve_peer_timeout(options_.peer_timeout);
  mo.host_id = local_host_id();
  mo.link_host_peers = env::transport_choice() != env::TransportChoice::tcp;
  if (const auto sockets = env::max_peer_sockets()) {
    mo.max_links = static_cast<std::size_t>(
        std::max<long long>(1, *sockets / (options_.sockets_per_peer + 1)));
  }
  return mo;
}

void GroupBuilder::connect_mesh() {
  // The formation's deadline starts here, once the environment's choices passed their checks.
  mesh_options_ = mesh_options();
  mesh_.emplace(build_mesh(store_, mesh_options_));
  formed_.membership = mesh_->membership;
  formed_.hosts = make_host_map(host_ids(formed_.membership));
}

void GroupBuilder::agree_link_costs() {
  // The network between hosts, timed between ring neighbours over their setup links before
  // the socket transport takes them; every rank then prices it alike.
  NetworkSamples network;
  network.probers = network_probers(id_.size, formed_.hosts.host_of);
  network.mine =
      probe_ring_network(*mesh_, id_.rank, id_.size, formed_.hosts.host_of, mesh_options_.deadline);
  formed_.prices = agree_on_prices(store_, formed_.membership.epoch, id_.rank,
                                   mesh_options_.deadline, host_probes(transport_layers()), network);
}

void GroupBuilder::build_stack() {
  // The single-copy algorithms and the shared-memory transport's small-op path need every
  // rank of the group on this host.
  const HostMap& hosts = formed_.hosts;
  const auto host = static_cast<std::size_t>(hosts.host_of[static_cast<std::size_t>(id_.rank)]);
  stack_ = make_transport(id_.rank, id_.size, *mesh_, hosts.members[host], mesh_options_.deadline,
                          hosts.members.size() == 1, formed_.prices);
  // The capability lives in the transport the engine owns, which outlives every op.
  formed_.one_sided = stack_.transport->one_sided();
  formed_.peer_memory = formed_.one_sided != nullptr;
  formed_.link_costs = stack_.costs;
}

std::unique_ptr<Engine> GroupBuilder::start_engine(EngineConfig hooks) {
  EngineConfig config = std::move(hooks);
  config.rank = id_.rank;
  config.size = id_.size;
  config.group = id_.name;
  config.peer_timeout = mesh_options_.peer_timeout;
  return std::make_unique<Engine>(std::move(config), std::move(stack_.transport));
}

}  // namespace chorus::cpu
