// SPDX-License-Identifier: BSD-3-Clause
// The transport of one rank of a group, built in layers over the mesh:
//   SocketTransport            every peer: control channel, tagged messages, liveness, and
//                              the collective streams to other hosts
//   ShmTransport (if any)      the collective streams to ranks on this host
//                              (CHORUS_TRANSPORT=auto|shm, shm_transport.hpp)
//   CmaTransport (if any)      the one-sided capability (cma_one_sided.hpp), where every
//                              rank is on this host and the peer memory probe passed
//   FaultTransport (if any)    CHORUS_FAULT faults of this rank (fault_transport.hpp)
#pragma once

#include "core/private.hpp"

#include <memory>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/bootstrap/mesh.hpp"
#include "cpu/transports/shm/slot_board.hpp"
#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

// What make_transport built, and what the algorithm choice needs to know about it.
struct TransportStack {
  std::unique_ptr<EngineTransport> transport;
  // Only when every rank of the group is on this host (the other fields stay false / null):
  bool peer_memory = false;          // the ranks reach each other's memory (peer_memory.hpp), so
                                     // the single-copy algorithms can run
  bool shared_memory = false;        // the collective streams go through shared memory
  std::shared_ptr<SlotBoard> board;  // the small-op board (slot_board.hpp), unless CHORUS_FAULT
                                     // is set
};

// Collective over the group (ranks on one host agree on shared memory over their control
// sockets before the sockets are handed over). Throws InvalidArgument when
// CHORUS_TRANSPORT=shm and shared memory cannot be set up.
// `host_ranks`: the sorted group ranks on this rank's host, this one included
// (HostMap::members of its host). `whole_group`: every rank of the group is on this host;
// other groups skip the peer memory probe and get no board.
TransportStack make_transport(int rank, int size, Mesh mesh, const std::vector<int>& host_ranks,
                              Deadline deadline, bool whole_group);

}  // namespace chorus::cpu
