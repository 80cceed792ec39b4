// SPDX-License-Identifier: BSD-3-Clause
// The registry of this process's live SharedBuffers (include/chorus/shared_buffer.hpp): what a
// tcp group tells its same-host peers so that they can map a buffer (tcp/peer_memory.hpp).
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace chorus {

// One SharedBuffer: a memfd mapped at `base`. A peer with ptrace access to this process opens
// it as /proc/<pid>/fd/<fd> and checks that the file it got has this inode number (the fd
// number alone could name another file by then).
struct SharedRegion {
  std::uint64_t base = 0;   // address in this process
  std::uint64_t bytes = 0;  // mapped length (the allocation rounded up to pages)
  std::uint64_t inode = 0;
  std::int32_t fd = -1;
};

// The live region holding [data, data + bytes) wholly, if there is one.
std::optional<SharedRegion> find_shared_region(const void* data, std::size_t bytes) noexcept;

}  // namespace chorus
