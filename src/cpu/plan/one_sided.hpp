// SPDX-License-Identifier: BSD-3-Clause
// The one-sided capability (Transport::one_sided()): how a rank names its memory to its peers
// (MemoryKey) and reaches theirs. Vocabulary of the plan: the algorithms name peers' memory by
// key, map it where it can be mapped and add read and write tasks (schedule.hpp), which the
// Executor posts here and completes by token; a transport implements it (transports/cma/). So
// both sides include it from here, and neither includes the other. No algorithm posts a transfer
// itself (scripts/check_layering.sh).
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace chorus::cpu {

// A registered buffer as its peers name it: fixed-size and opaque, so that it travels to them
// in an ordinary message. It names the process and the memory, and where the memory lies in a
// SharedBuffer (core/shared_regions.hpp), its memfd. All zeros: nothing registered.
struct MemoryKey {
  static constexpr std::size_t kBytes = 64;
  std::array<std::uint8_t, kBytes> bytes{};
};

// A peer's registered memory mapped into this process (OneSided::map): plain loads and stores
// at `at` (the registered address). The mapping lasts while `hold` is held: an op keeps it until
// its work ends, so a peer's buffer is never unmapped under a running copy.
struct PeerView {
  std::byte* at = nullptr;
  std::shared_ptr<const void> hold;
};

// How a one-sided transfer went. CMA's complete before the call returns; a transport that
// completes later (RDMA) sets `pending` and reports `token` through poll()'s completed list, as
// sends and receives do, in any order (a failure then comes as an event: peer_failed or
// local_failure).
struct OneSidedResult {
  bool pending = false;
  std::string error;  // completed and failed: why (the caller names the peer, as LocalFailure)
  bool ok() const noexcept { return !pending && error.empty(); }
};

class OneSided {
 public:
  virtual ~OneSided() = default;

  // A key for `bytes` at `data` of this process, for peers to read and write (no system call:
  // it is built on every op). The memory must stay valid while a peer may use the key; the
  // direct algorithms ensure it by their release messages.
  virtual MemoryKey register_buffer(const void* data, std::size_t bytes) const = 0;
  // Whether map() can give direct load/store access to the memory `key` names (it lies in a
  // SharedBuffer). Depends on the key alone, so every rank that holds the key agrees.
  virtual bool mappable(const MemoryKey& key) const noexcept = 0;
  // Copies `bytes` at byte `offset` of the memory `key` names (registered by `peer`) to `dst`.
  virtual OneSidedResult post_read(int peer, const MemoryKey& key, std::size_t offset, void* dst,
                                   std::size_t bytes, std::uint64_t token) = 0;
  // Copies `bytes` from `src` to byte `offset` of the memory `key` names.
  virtual OneSidedResult post_write(int peer, const MemoryKey& key, std::size_t offset,
                                    const void* src, std::size_t bytes, std::uint64_t token) = 0;
  // The peer's memory mapped here, or `at` null with the reason in `why` where it cannot be
  // (not mappable(), the peer exited, the kernel refuses): the caller then uses read and write
  // tasks, which reach that memory all the same, more slowly.
  virtual PeerView map(int peer, const MemoryKey& key, std::string& why) = 0;
};

}  // namespace chorus::cpu
