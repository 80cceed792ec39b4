// SPDX-License-Identifier: BSD-3-Clause
// A copy whose destination bypasses the caches (non-temporal stores), for data that the
// writer will not read again and that lands in memory nobody reads soon: a plain store first
// reads the destination line from memory (read for ownership), so a copy to memory out of the
// cache costs three transfers per line instead of two. glibc's memcpy does the same above
// about three quarters of the last-level cache, but the single-copy algorithms copy in pieces
// far smaller than that into buffers far larger.
#pragma once

#include "core/private.hpp"

#include <cstddef>

namespace chorus {

// Copies `bytes` from `src` to `dst` (not overlapping), the destination's aligned part with
// non-temporal stores where the processor has them (x86-64: SSE2), else memcpy. Call
// stream_fence() before another thread or process may read `dst`.
void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept;
// Orders the non-temporal stores made so far before any later store (sfence on x86-64).
void stream_fence() noexcept;

}  // namespace chorus
