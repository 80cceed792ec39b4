// SPDX-License-Identifier: BSD-3-Clause
// Every difference between the torches the bridge builds against (1.13 and 2.0 through 2.15),
// in one place: each is a CHORUS_TORCH_* macro named for what it switches, and no other file
// of the bridge reads torch's version. Also what a torch.distributed backend derives from:
// c10d::ProcessGroup on torch 1.x, c10d::Backend on torch 2.x (where a ProcessGroup
// dispatches to one Backend per device); the virtual ops have the same signatures on both.
#pragma once

#include <torch/version.h>

#define CHORUS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// A backend derives from c10d::Backend (torch 2.x), not c10d::ProcessGroup (1.x).
#define CHORUS_TORCH_BACKEND_CLASS CHORUS_TORCH_AT_LEAST(2, 0)
// torch 2.x's coalescing manager calls allgather_into_tensor_coalesced and
// reduce_scatter_tensor_coalesced on the backend.
#define CHORUS_TORCH_COALESCED_TENSOR_OPS CHORUS_TORCH_AT_LEAST(2, 0)
// TCPStoreOptions has useLibUV (torch 2.x; 2.4 and later default to it).
#define CHORUS_TORCH_STORE_LIBUV_OPTION CHORUS_TORCH_AT_LEAST(2, 0)
// torch's destroy_process_group() calls Backend::shutdown() on every backend of the groups it
// destroys (before 2.7: only on NCCL's).
#define CHORUS_TORCH_BACKEND_SHUTDOWN CHORUS_TORCH_AT_LEAST(2, 7)
// c10d::Store::clone() is pure virtual: every store says how to copy itself for another
// thread.
#define CHORUS_TORCH_STORE_CLONE CHORUS_TORCH_AT_LEAST(2, 8)

#if CHORUS_TORCH_BACKEND_CLASS
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace chorus::torch_bridge {
using TorchBackendBase = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace chorus::torch_bridge {
using TorchBackendBase = c10d::ProcessGroup;
}
#endif
