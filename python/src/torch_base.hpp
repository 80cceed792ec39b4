// SPDX-License-Identifier: BSD-3-Clause
// What a torch.distributed backend derives from: c10d::ProcessGroup on torch 1.x,
// c10d::Backend on torch 2.x (where a ProcessGroup dispatches to one Backend per device).
// The virtual ops have the same signatures on both.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
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
