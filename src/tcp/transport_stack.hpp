// SPDX-License-Identifier: BSD-3-Clause
// The transport of one rank of a group, built in layers over the mesh:
//   SocketTransport            every peer: control channel, tagged messages, liveness, and
//                              the collective streams to other hosts
//   ShmTransport (if any)      the collective streams to ranks on this host
//                              (CHORUS_TRANSPORT=auto|shm, shm_transport.hpp)
//   FaultTransport (if any)    CHORUS_FAULT faults of this rank (fault_transport.hpp)
#pragma once

#include "core/private.hpp"

#include <memory>
#include <vector>

#include <chorus/deadline.hpp>

#include "tcp/mesh.hpp"
#include "tcp/slot_board.hpp"
#include "tcp/transport.hpp"

namespace chorus::tcp {

// Collective over the group (ranks on one host agree on shared memory over their control
// sockets before the sockets are handed over). Throws InvalidArgument when
// CHORUS_TRANSPORT=shm and shared memory cannot be set up.
// `host_ranks`: the sorted group ranks on this rank's host, this one included
// (HostMap::members of its host). When `whole_group` (every rank of the group is on this
// host), `peer_memory` is set if the collective streams go through shared memory and the
// ranks reach each other's memory (peer_memory.hpp): they then agree that the single-copy
// algorithms can run. Other groups skip that probe. `shared_memory` is set when `whole_group`
// and the collective streams go through shared memory; `board` then too, to the small-op board
// (slot_board.hpp), unless CHORUS_FAULT is set.
std::unique_ptr<EngineTransport> make_transport(int rank, int size, Mesh mesh,
                                                const std::vector<int>& host_ranks,
                                                Deadline deadline, bool whole_group,
                                                bool& peer_memory, bool& shared_memory,
                                                std::shared_ptr<SlotBoard>& board);

}  // namespace chorus::tcp
