// SPDX-License-Identifier: BSD-3-Clause
// SharedBuffer: host memory that the other ranks of a tcp group on this host can map, so that
// the group's large collectives read and write it directly instead of copying every byte
// through shared rings (the CPU counterpart of NCCL's ncclMemAlloc + buffer registration).
//
//   chorus::SharedBuffer grads(n * sizeof(float));
//   auto t = chorus::Tensor(grads.data(), n, chorus::DataType::float32);
//   pg->allreduce(t)->wait();   // single copy when every rank's tensor lives in a SharedBuffer
//
// Any Tensor that lies wholly inside one SharedBuffer counts (a slice of a larger buffer too).
// A group takes the single-copy path for allreduce, reduce_scatter, allgather and broadcast
// whose count is at least 256 KiB (per rank: the output block of reduce_scatter, the input of
// allgather) when every rank of the group runs on this host and the ranks may read each
// other's memory (same user, no Yama ptrace_scope >= 1 or seccomp filter forbidding it:
// CHORUS_DEBUG=INFO says which at group setup), unless CHORUS_ALGO forces another algorithm.
// The buffers that count are those the peers touch: an allreduce's input and output, the
// others' input (broadcast: the tensor). Elsewhere a SharedBuffer is ordinary memory and
// everything works as before.
//
// The single copy needs SharedBuffer memory on every rank. Ranks may mix memory kinds: the
// group agrees inside the op (each rank's buffer keys ride in the op's headers), and where one
// rank passes ordinary memory every rank runs the algorithm ordinary memory gets (shared
// rings): the same results, without the speed-up.
//
// The memory is zero-filled, page-aligned, and reserved when allocated (a host short of
// memory fails here, never with SIGBUS later). It costs one file descriptor while it lives.
// A peer that mapped it keeps the pages after it is freed, until that peer's group is
// destroyed or it maps other buffers in its place (up to 64 per peer are kept). A child made
// by fork() shares the memory with its parent (it is not copied on write).
//
// The DDP toolkit's GradientReducer (ddp.hpp) packs its buckets into SharedBuffers already.
#pragma once

#include <cstddef>

#include <chorus/export.hpp>

namespace chorus {

class CHORUS_API SharedBuffer {
 public:
  SharedBuffer() noexcept = default;  // empty: no memory, size 0
  // Allocates `bytes` (0 allocates nothing). Throws chorus::BackendError saying why (out of
  // memory, out of file descriptors) when the memory cannot be had.
  explicit SharedBuffer(std::size_t bytes);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// The smallest op, its count in bytes, that takes the single-copy path (the sizes above); below
// it the shared rings are faster, and a SharedBuffer is ordinary memory to the op.
inline constexpr std::size_t kSharedBufferMinOpBytes = 256 * 1024;

// Whether [data, data + bytes) lies wholly inside one live SharedBuffer of this process.
CHORUS_API bool in_shared_buffer(const void* data, std::size_t bytes) noexcept;

}  // namespace chorus
