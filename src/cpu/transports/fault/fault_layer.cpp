// SPDX-License-Identifier: BSD-3-Clause
// The fault transport's entry in the transport table (transport_stack.hpp): on top of every
// rank's stack while CHORUS_FAULT is set, nowhere otherwise (no cost).
#include "cpu/transports/fault/fault_transport.hpp"
#include "cpu/transports/transport_stack.hpp"

#include "core/env.hpp"

namespace chorus::cpu {

TransportLayer fault_layer() {
  TransportLayer layer;
  layer.name = "fault";
  layer.applies = [](const StackContext&) { return env::get("CHORUS_FAULT").has_value(); };
  layer.prepare = [](StackContext& ctx) -> LayerBuild {
    // Parsed here, so a malformed value fails the group's creation on every rank.
    std::vector<Fault> faults = faults_for(ctx.rank, ctx.size);
    // Also on the ranks CHORUS_FAULT does not name, with no faults: every rank's FaultTransport
    // hides the small-op path (see FaultTransport::small_ops()), and all ranks must agree on
    // which path an op takes.
    return [faults = std::move(faults)](std::unique_ptr<EngineTransport> below,
                                        StackContext& ctx) -> std::unique_ptr<EngineTransport> {
      return std::make_unique<FaultTransport>(ctx.rank, std::move(below), faults);
    };
  };
  return layer;
}

}  // namespace chorus::cpu
