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
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "tcp/mesh.hpp"
#include "tcp/transport.hpp"

namespace chorus::tcp {

struct TransportInfo {
  const char* kind = "tcp";  // "tcp", or "tcp+shm" when shared memory carries some streams
  int host_ranks = 1;        // ranks of the group on this host (this one included)
};

// Collective over the group (ranks on one host agree on shared memory over their control
// sockets before the sockets are handed over). Throws InvalidArgument when
// CHORUS_TRANSPORT=shm and shared memory cannot be set up.
// `host_ids`: every rank's host id (Membership::host_ids).
std::unique_ptr<EngineTransport> make_transport(int rank, int size, Mesh mesh,
                                                const std::vector<std::string>& host_ids,
                                                Deadline deadline, TransportInfo* info = nullptr);

}  // namespace chorus::tcp
