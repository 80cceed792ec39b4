// SPDX-License-Identifier: BSD-3-Clause
// The transport of one rank of a group, built in layers from a table (transport_layers()),
// bottom first; a layer applies or not, and wraps the one below:
//   socket   always               every peer: control channel, tagged messages, liveness, and
//                                 the collective streams to other hosts (socket/)
//   shm      ranks on this host   the collective streams to ranks on this host, and the
//            (CHORUS_TRANSPORT    small-op board when the whole group is on it (shm/)
//            auto|shm)
//   cma      the whole group on   the one-sided capability (cma/): process_vm_readv/writev
//            this host, its peer  and the peers' SharedBuffers mapped
//            memory probe passed
//   fault    CHORUS_FAULT set     the faults CHORUS_FAULT names for this rank (fault/)
// Each layer also declares what it measures on a host (its probes) and prices the peer classes
// it serves (same host, other hosts) for the algorithm choice: a transport prices itself.
// Each transport defines its own entry next to its code (socket_layer(), shm_layer(),
// cma_layer(), fault_layer()); transport_table.def is the one place that lists them. Tests build
// stacks from their own tables through the same build_stack() (tests/tcp/memory_fabric.hpp's
// layer() as the bottom, fault_layer() above it). docs/adding-a-transport.md says how to add an
// entry.
#pragma once

#include "core/private.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/plan/cost_model.hpp"
#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

// The group's socket links (socket/mesh.hpp), which the stack hands to the layers without
// looking inside: named here, not included, so that this file, which every transport includes
// for its table entry, does not include one of them.
struct Mesh;

// What the layers of one rank's stack see while it is built, and what they report back.
struct StackContext {
  int rank = 0;
  int size = 1;
  // This rank's links (production); the bottom layer takes them. Layers above may talk to their
  // peers over the links' control sockets in prepare(), before the bottom layer takes them.
  // Null where the bottom layer needs none (tests).
  Mesh* mesh = nullptr;
  // The sorted group ranks on this rank's host, this one included.
  std::vector<int> host_ranks;
  // Every rank of the group is on this host (the same on every rank).
  bool whole_group = false;
  Deadline deadline = Deadline::never();
  // Reported by the layers, for the algorithm choice (only when every rank of the group is on
  // this host; false otherwise):
  bool peer_memory = false;    // the ranks reach each other's memory (cma/peer_memory.hpp), so
                               // the single-copy algorithms can run
  bool shared_memory = false;  // the collective streams go through shared memory
  // The group's agreed price list (link_costs.hpp), which the layers price their peer classes
  // from. Null: every layer's fallbacks.
  const PriceList* prices = nullptr;
};

// Builds a layer's transport over `below` (null for the bottom layer, which must not be null
// otherwise). Runs after every layer's prepare().
using LayerBuild = std::function<std::unique_ptr<EngineTransport>(
    std::unique_ptr<EngineTransport> below, StackContext& ctx)>;

// One entry of the table.
struct TransportLayer {
  std::string name;  // for logs and docs: "socket", "shm", "fault"
  // Whether the layer may apply to this rank's stack: cheap, no I/O, no peers (ranks on one
  // host, an environment variable set). Where it depends on something every rank sees alike, all
  // ranks decide alike.
  std::function<bool(const StackContext&)> applies;
  // The layer's set-up, collective with the peers it involves where needed (over ctx.mesh's
  // control sockets, before the bottom layer takes them); may throw (say, a setting it cannot
  // honour). Returns the layer's build step, or an empty function when it declines after all
  // (its peers agreed it cannot run here).
  std::function<LayerBuild(StackContext& ctx)> prepare;
  // What the layer measures on a host: its entries of the host's price list (measured once per
  // host and cached with the others, link_costs.hpp). May be empty.
  std::vector<LinkProbe> probes;
  // Prices the peer classes the layer serves (and the rates it owns) in `costs`, from the
  // group's price list. Called after every prepare(), for every layer of the table in order,
  // whether it applies on this rank or not: a layer above overrides the classes it takes over
  // from the layers below. It must decide from what every rank of the group sees alike (the
  // price list, the context's group-wide facts, the environment), so that every rank holds the
  // same figures. Empty: the layer prices nothing.
  std::function<void(const StackContext& ctx, const PriceList& prices, LinkCosts& costs)> price;
};

// What make_transport built, and what the algorithm choice needs to know about it.
struct TransportStack {
  std::unique_ptr<EngineTransport> transport;
  bool shared_memory = false;  // StackContext::shared_memory
  LinkCosts costs;             // the figures the algorithm choice reads (price_stack())
};

// The entries of the production table (transport_table.def), each defined in its transport's
// folder (<name>/<name>_layer.cpp): socket_layer(), shm_layer(), cma_layer(), fault_layer().
#define CHORUS_TRANSPORT_LAYER(name) TransportLayer name##_layer();
#include "cpu/transports/transport_table.def"
#undef CHORUS_TRANSPORT_LAYER

// The production table, bottom first: socket, shm, cma, fault.
const std::vector<TransportLayer>& transport_layers();

// Every probe the layers of `layers` declare, in table order: what a host measures.
std::vector<LinkProbe> host_probes(const std::vector<TransportLayer>& layers);

// The figures the algorithm choice reads for a stack over `layers`: the host's rates from the
// price list (ctx.prices, else the fallbacks), then each layer's price() in table order.
LinkCosts price_stack(const std::vector<TransportLayer>& layers, const StackContext& ctx);

// Builds a stack from `layers` (bottom first): prepares every layer that applies, in order,
// then builds them from the bottom up. The first layer must apply and build (the bottom).
TransportStack build_stack(const std::vector<TransportLayer>& layers, StackContext& ctx);

// build_stack(transport_layers()) over `mesh` (the socket layer takes its links): collective over
// the group (ranks on one host agree on shared memory over their control sockets before the sockets
// are handed over). Throws InvalidArgument when CHORUS_TRANSPORT=shm and shared memory cannot be
// set up. `host_ranks`: the sorted group ranks on this rank's host, this one included
// (HostMap::members of its host). `whole_group`: every rank of the group is on this host;
// other groups skip the peer memory probe and get no small-op board.
// `prices`: the group's agreed price list.
TransportStack make_transport(int rank, int size, Mesh& mesh, const std::vector<int>& host_ranks,
                              Deadline deadline, bool whole_group, const PriceList& prices);

}  // namespace chorus::cpu
