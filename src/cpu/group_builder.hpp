// SPDX-License-Identifier: BSD-3-Clause
// GroupBuilder: the steps that form a CPU group, in order, each a named function: read the
// choices the environment makes (before any connection, so a bad value fails every rank alike,
// at once), connect the mesh, agree on the link costs, build the transport stack, then start the
// engine over it. CpuProcessGroup's constructor runs them and keeps what they made.
#pragma once

#include "core/private.hpp"

#include <memory>
#include <optional>
#include <string>

#include <chorus/deadline.hpp>
#include <chorus/process_group.hpp>
#include <chorus/store.hpp>

#include "core/backend.hpp"
#include "cpu/algorithms/algorithms.hpp"
#include "cpu/bootstrap/link_costs.hpp"
#include "cpu/bootstrap/membership.hpp"
#include "cpu/engine/engine.hpp"
#include "cpu/transports/socket/mesh.hpp"
#include "cpu/transports/transport_stack.hpp"

namespace chorus::cpu {

// Which group is being formed: this rank's place in it, its name and its timeout.
struct GroupIdentity {
  int rank = 0;
  int size = 1;
  std::string name;
  Duration timeout{};
};

// What forming the group made, less the engine: what its ops' algorithms are chosen by.
struct FormedGroup {
  AlgorithmOverrides forced{};  // CHORUS_ALGO
  // TcpGroupOptions::wire_dtype, else CHORUS_WIRE_DTYPE: the wire of ops that set none.
  std::optional<DataType> wire_default;
  Membership membership;
  HostMap hosts;                  // which ranks share a host: picks the hierarchical algorithms
  PriceList prices;               // what the group measured, agreed by every rank
  LinkCosts link_costs;           // the α/β figures every rank chooses by, priced by the stack
  OneSided* one_sided = nullptr;  // the transport's capability (the engine owns the transport)
  bool peer_memory = false;       // every rank on this host, in reach: one_sided offered
};

class GroupBuilder {
 public:
  // `formation`: the bound on forming the group (connecting its links), and when to give up
  // early; by default the group's timeout from now.
  GroupBuilder(Store& store, GroupIdentity id, const TcpGroupOptions& options,
               std::optional<detail::Formation> formation);

  // Every step up to the transport stack, in order.
  FormedGroup form();
  // After form(): the engine over the stack built, with `hooks` (EngineConfig::on_failure and
  // on_start: the group's) and the rest of its configuration filled in here.
  std::unique_ptr<Engine> start_engine(EngineConfig hooks);

 private:
  void read_environment();
  MeshOptions mesh_options();  // takes formation_
  void connect_mesh();
  void agree_link_costs();
  void build_stack();

  Store& store_;
  const GroupIdentity id_;
  const TcpGroupOptions& options_;
  std::optional<detail::Formation> formation_;
  MeshOptions mesh_options_;  // connect_mesh()'s, read by the later steps
  // What the stack did not take of the mesh lives until the builder goes (the end of the
  // group's constructor), after the engine started.
  std::optional<Mesh> mesh_;
  TransportStack stack_;  // build_stack() to start_engine()
  FormedGroup formed_;
};

}  // namespace chorus::cpu
