// SPDX-License-Identifier: BSD-3-Clause
// The peers' SharedBuffers (include/chorus/shared_buffer.hpp) mapped into this process, so
// that the single-copy algorithms (algorithms/direct.cpp) read and write them with plain loads
// and stores: no system call per piece, and no bounce through a scratch piece, where
// process_vm_readv/writev (peer_memory.hpp) cost both.
//
// A peer describes a buffer by its memfd's fd number and inode (core/shared_regions.hpp). This
// rank opens /proc/<pid>/fd/<fd> (the kernel allows it where process_vm_readv is allowed: the
// group's peer memory probe has passed), checks the inode, so a reused fd number can never map
// a stranger's file, and maps the whole buffer. Mappings are kept for the next op, a few per
// peer, least recently used dropped first; an op holds the ones it uses until its work ends.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/shared_regions.hpp"

namespace chorus::cpu {

// One peer buffer mapped here; unmapped when the last holder lets go.
class PeerMapping {
 public:
  PeerMapping(std::byte* at, std::size_t bytes) noexcept : at_(at), bytes_(bytes) {}
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;

  // Where the peer's address `peer_address` (inside the buffer) is mapped here.
  std::byte* at(std::uint64_t peer_base, std::uint64_t peer_address) const noexcept {
    return at_ + (peer_address - peer_base);
  }

 private:
  std::byte* at_;
  std::size_t bytes_;
};

class PeerBuffers {
 public:
  // Mappings kept per peer process between ops: enough for the buckets of a large model
  // (GradientReducer: 40 buckets of 25 MiB for 1 GB of gradients), each mapped once.
  static constexpr std::size_t kPerPeer = 64;

  // The buffer `region` of process `pid`, mapped here (on first use: opened and checked).
  // nullptr with the reason in `why` when it cannot be (the process exited, the kernel
  // refuses, the fd now names another file).
  std::shared_ptr<PeerMapping> map(std::int64_t pid, const SharedRegion& region, std::string& why);

  // Mappings held for the next op (for tests).
  std::size_t kept() const;

 private:
  struct Entry {
    std::int64_t pid = 0;
    std::uint64_t inode = 0;
    std::uint64_t bytes = 0;
    std::uint64_t last_use = 0;
    std::shared_ptr<PeerMapping> mapping;
  };
  mutable std::mutex mutex_;  // the engine thread and a driving caller may both run ops
  std::vector<Entry> entries_;
  std::uint64_t uses_ = 0;
};

}  // namespace chorus::cpu
