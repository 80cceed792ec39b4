// SPDX-License-Identifier: BSD-3-Clause
// Moving a torch tensor's memory into a chorus SharedBuffer in place, as torch's
// Tensor.share_memory_() moves it into torch's shared memory: the storage keeps its identity,
// so every tensor that shares it (views, a DDP bucket and the gradients that are views of it)
// now reads and writes the SharedBuffer, and the group's large collectives on it take the
// single-copy path (chorus/shared_buffer.hpp).
#pragma once

#include <ATen/ATen.h>

namespace chorus::torch_bridge {

// Copies the bytes of `t`'s storage into a new SharedBuffer and swaps the storage's memory for
// it; the old memory is freed. Returns false, changing nothing, when the storage is empty or
// already in a SharedBuffer. Throws chorus::InvalidArgument for a tensor that is not on the
// CPU and chorus::BackendError when the memory cannot be had (out of memory or file
// descriptors). Not while another thread uses the storage: its old address dies here.
bool move_to_shared_buffer(const at::Tensor& t);

}  // namespace chorus::torch_bridge
