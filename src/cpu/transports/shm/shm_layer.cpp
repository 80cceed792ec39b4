// SPDX-License-Identifier: BSD-3-Clause
// The shared-memory transport's entry in the transport table (transport_stack.hpp): over the
// socket transport when other ranks of the group share this host and CHORUS_TRANSPORT allows
// it. Its set-up agrees on one segment with the host's ranks over the control sockets (every
// rank of the host gets the same answer, so all of them wrap or none), and probes peer memory
// when the whole group is on this host.
#include "cpu/transports/shm/shm_price.hpp"
#include "cpu/transports/shm/shm_segment.hpp"
#include "cpu/transports/shm/shm_transport.hpp"
#include "cpu/transports/transport_stack.hpp"

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/format.hpp"
#include "core/logging.hpp"

namespace chorus::cpu {

TransportLayer shm_layer() {
  TransportLayer layer;
  layer.name = "shm";
  layer.applies = [](const StackContext& ctx) {
    return ctx.host_ranks.size() > 1 && env::transport_choice() != env::TransportChoice::tcp;
  };
  layer.prepare = [](StackContext& ctx) -> LayerBuild {
    const int rank = ctx.rank;
    const std::vector<int>& locals = ctx.host_ranks;
    std::string why_not;
    std::shared_ptr<ShmSegment> segment =
        attach_host_segment(*ctx.mesh, rank, locals, ctx.deadline, ctx.whole_group, why_not);
    if (!segment) {
      if (env::transport_choice() == env::TransportChoice::shm) {
        throw InvalidArgument(fmt::format(
            "CHORUS_TRANSPORT=shm on rank {}: shared memory between host ranks {} cannot be set "
            "up: {}; check /dev/shm (mounted, writable, free space), or use "
            "CHORUS_TRANSPORT=auto to fall back to tcp",
            rank, format_ranks(locals), why_not));
      }
      CHORUS_WARN(init,
                  "rank {}: shared memory between host ranks {} cannot be set up ({}); their "
                  "collectives go over loopback tcp",
                  rank, format_ranks(locals), why_not);
      return {};
    }
    CHORUS_INFO(init, "rank {}: collectives with host ranks {} go through shared memory", rank,
                format_ranks(locals));
    ctx.peer_memory = segment->peer_memory();
    if (!ctx.peer_memory && ctx.whole_group) {
      CHORUS_INFO(init,
                  "rank {}: host ranks {} cannot reach each other's memory ({}); the single-copy "
                  "algorithms are off",
                  rank, format_ranks(locals), segment->peer_memory_why_not());
    }
    ctx.shared_memory = ctx.whole_group;
    return [segment = std::move(segment)](std::unique_ptr<EngineTransport> below,
                                          StackContext& ctx) -> std::unique_ptr<EngineTransport> {
      // The board (the SmallOps capability) only where the whole group is on this host: it
      // needs every rank's slot, and the segment has one only then.
      return std::make_unique<ShmTransport>(ctx.rank, ctx.size, ctx.host_ranks, segment,
                                            std::move(below), ctx.whole_group);
    };
  };
  layer.probes = {{"shm", kShmFallback, measure_shm_rings}};
  // The ranks of one host, wherever the rings carry their streams: in a group spread over
  // hosts (every host with several ranks sets up its rings, and a host of one has no same-host
  // peer to price), or in a one-host group whose ranks agreed on a segment.
  layer.price = [](const StackContext& ctx, const PriceList& prices, LinkCosts& costs) {
    if (env::transport_choice() == env::TransportChoice::tcp ||
        (ctx.whole_group && !ctx.shared_memory)) {
      return;
    }
    costs.same_host = prices.link("shm", kShmFallback);
  };
  return layer;
}

}  // namespace chorus::cpu
