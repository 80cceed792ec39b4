// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/transport_stack.hpp"

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/format.hpp"
#include "core/logging.hpp"
#include "cpu/transports/cma/cma_one_sided.hpp"
#include "cpu/transports/fault/fault_transport.hpp"
#include "cpu/transports/shm/shm_segment.hpp"
#include "cpu/transports/shm/shm_transport.hpp"
#include "cpu/transports/socket/socket_transport.hpp"

namespace chorus::cpu {

TransportStack make_transport(int rank, int size, Mesh mesh, const std::vector<int>& locals,
                              Deadline deadline, bool whole_group) {
  TransportStack out;
  const env::TransportChoice choice = env::transport_choice();
  std::unique_ptr<ShmSegment> segment;
  if (choice != env::TransportChoice::tcp && locals.size() > 1) {
    std::string why_not;
    segment = attach_host_segment(mesh, rank, locals, deadline, whole_group, why_not);
    if (!segment) {
      if (choice == env::TransportChoice::shm) {
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
    }
  }
  std::vector<Fault> faults = faults_for(rank, size);
  std::unique_ptr<EngineTransport> transport =
      std::make_unique<SocketTransport>(rank, size, std::move(mesh), locals);
  if (segment) {
    CHORUS_INFO(init, "rank {}: collectives with host ranks {} go through shared memory", rank,
                format_ranks(locals));
    out.peer_memory = segment->peer_memory();
    if (!out.peer_memory && whole_group) {
      CHORUS_INFO(init,
                  "rank {}: host ranks {} cannot reach each other's memory ({}); the single-copy "
                  "algorithms are off",
                  rank, format_ranks(locals), segment->peer_memory_why_not());
    }
    out.shared_memory = whole_group;
    std::shared_ptr<ShmSegment> shared = std::move(segment);
    // Not under CHORUS_FAULT: faults are rehearsed on the engine's paths (they fire when the
    // engine starts an op, and board ops mostly run on the caller's thread).
    if (whole_group && faults.empty()) {
      out.board = std::make_shared<SlotBoard>(shared, rank, size);
    }
    transport =
        std::make_unique<ShmTransport>(rank, size, locals, std::move(shared), std::move(transport));
    // The one-sided capability only where every rank of the group passed the probe (the
    // verdict is shared), so that choices made by it agree.
    if (out.peer_memory && whole_group) {
      transport = std::make_unique<CmaTransport>(std::move(transport));
    }
  }
  if (!faults.empty()) {
    transport = std::make_unique<FaultTransport>(rank, std::move(transport), std::move(faults));
  }
  out.transport = std::move(transport);
  return out;
}

}  // namespace chorus::cpu
