// SPDX-License-Identifier: BSD-3-Clause
// The table of transport layers and the one function that builds a stack from a table (see
// transport_stack.hpp). Knows no transport: each entry comes from its transport's folder.
#include "cpu/transports/transport_stack.hpp"

#include <utility>

#include "core/check.hpp"

namespace chorus::cpu {

const std::vector<TransportLayer>& transport_layers() {
  // Bottom first, as transport_table.def lists them.
  static const std::vector<TransportLayer> table = {
#define CHORUS_TRANSPORT_LAYER(name) name##_layer(),
#include "cpu/transports/transport_table.def"
#undef CHORUS_TRANSPORT_LAYER
  };
  return table;
}

TransportStack build_stack(const std::vector<TransportLayer>& layers, StackContext& ctx) {
  CHORUS_CHECK(!layers.empty(), "an empty transport table");
  // Every layer's set-up first, in table order: set-ups may still talk to their peers over the
  // mesh's control sockets, which the bottom layer's build takes.
  std::vector<LayerBuild> builds;
  builds.reserve(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const TransportLayer& layer = layers[i];
    if (!layer.applies(ctx)) {
      CHORUS_CHECK(i > 0, "the bottom transport layer {} does not apply", layer.name);
      continue;
    }
    LayerBuild build = layer.prepare(ctx);
    CHORUS_CHECK(i > 0 || build, "the bottom transport layer {} declined", layer.name);
    if (build) {
      builds.push_back(std::move(build));
    }
  }
  std::unique_ptr<EngineTransport> transport;
  for (LayerBuild& build : builds) {
    transport = build(std::move(transport), ctx);
  }
  TransportStack out;
  out.transport = std::move(transport);
  out.shared_memory = ctx.shared_memory;
  out.costs = price_stack(layers, ctx);
  return out;
}

std::vector<LinkProbe> host_probes(const std::vector<TransportLayer>& layers) {
  std::vector<LinkProbe> out;
  for (const TransportLayer& layer : layers) {
    out.insert(out.end(), layer.probes.begin(), layer.probes.end());
  }
  return out;
}

LinkCosts price_stack(const std::vector<TransportLayer>& layers, const StackContext& ctx) {
  // A list without the layers' entries: each layer's price() takes its fallbacks.
  const PriceList fallbacks;
  const PriceList& prices = ctx.prices != nullptr ? *ctx.prices : fallbacks;
  LinkCosts costs = default_link_costs();
  costs.memcpy_gbps = prices.memcpy_gbps;
  costs.reduce_gbps = prices.reduce_gbps;
  costs.host_cpus = prices.host_cpus;
  for (const TransportLayer& layer : layers) {
    if (layer.price) {
      layer.price(ctx, prices, costs);
    }
  }
  return costs;
}

TransportStack make_transport(int rank, int size, Mesh& mesh, const std::vector<int>& host_ranks,
                              Deadline deadline, bool whole_group, const PriceList& prices) {
  StackContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  ctx.mesh = &mesh;
  ctx.host_ranks = host_ranks;
  ctx.whole_group = whole_group;
  ctx.deadline = deadline;
  ctx.prices = &prices;
  return build_stack(transport_layers(), ctx);
}

}  // namespace chorus::cpu
