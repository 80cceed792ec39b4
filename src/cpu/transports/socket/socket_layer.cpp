// SPDX-License-Identifier: BSD-3-Clause
// The socket transport's entry in the transport table (transport_stack.hpp): the bottom of
// every production stack. It takes the mesh's links, so it builds after every layer's set-up.
// It prices every peer (socket_price.hpp).
#include "cpu/transports/socket/socket_price.hpp"
#include "cpu/transports/socket/socket_transport.hpp"
#include "cpu/transports/transport_stack.hpp"

#include "core/check.hpp"

namespace chorus::cpu {

TransportLayer socket_layer() {
  TransportLayer layer;
  layer.name = "socket";
  layer.applies = [](const StackContext&) { return true; };
  layer.prepare = [](StackContext&) -> LayerBuild {
    return [](std::unique_ptr<EngineTransport> below, StackContext& ctx) {
      CHORUS_CHECK(below == nullptr && ctx.mesh != nullptr,
                   "the socket transport is a bottom layer over the group's mesh");
      std::unique_ptr<EngineTransport> t = std::make_unique<SocketTransport>(
          ctx.rank, ctx.size, std::move(*ctx.mesh), ctx.host_ranks);
      ctx.mesh = nullptr;  // taken
      return t;
    };
  };
  layer.probes = {{"socket", kSocketFallback, measure_loopback_tcp}};
  // Every peer at first: loopback tcp on the host, the network to other hosts (agreed between
  // ring neighbours when the group forms, network_probe.hpp). Layers above take over classes.
  layer.price = [](const StackContext&, const PriceList& prices, LinkCosts& costs) {
    costs.same_host = prices.link("socket", kSocketFallback);
    costs.other_host = prices.link(kNetworkPriceName, kNetworkFallback);
  };
  return layer;
}

}  // namespace chorus::cpu
