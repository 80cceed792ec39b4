// SPDX-License-Identifier: BSD-3-Clause
// The cross-memory-attach entry in the transport table (transport_stack.hpp): the one-sided
// capability (cma_one_sided.hpp) over the layers below, only where every rank of the group is on
// this host and the shared-memory layer's peer memory probe passed. That verdict is shared by
// the group's ranks, so every rank offers the capability or none does, and choices made by it
// agree.
#include "cpu/transports/cma/cma_one_sided.hpp"
#include "cpu/transports/cma/cma_price.hpp"
#include "cpu/transports/transport_stack.hpp"

namespace chorus::cpu {

TransportLayer cma_layer() {
  TransportLayer layer;
  layer.name = "cma";
  // Runs after the shm layer's prepare(), which reports ctx.peer_memory.
  layer.applies = [](const StackContext& ctx) { return ctx.whole_group && ctx.peer_memory; };
  layer.prepare = [](StackContext&) -> LayerBuild {
    return [](std::unique_ptr<EngineTransport> below,
              StackContext&) -> std::unique_ptr<EngineTransport> {
      return std::make_unique<CmaTransport>(std::move(below));
    };
  };
  layer.probes = {{"peer_copy", kPeerCopyFallback, measure_peer_copy}};
  // Only the single-copy algorithms read it, and they run only where this layer applies.
  layer.price = [](const StackContext&, const PriceList& prices, LinkCosts& costs) {
    costs.peer_copy_gbps = prices.link("peer_copy", kPeerCopyFallback).gbps;
  };
  return layer;
}

}  // namespace chorus::cpu
