// SPDX-License-Identifier: BSD-3-Clause
// What the shared-memory rings cost between ranks of one host ("shm" in the price list).
#pragma once

#include <optional>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

// Where nothing was measured: the probe's medians on the 2-core VM the project is developed on.
inline constexpr LinkCost kShmFallback{3.3, 22.7};

// A round: half the round trip of two threads that each sleep on a futex word until the other
// wakes them (the waiting rank has gone to sleep), the median of five batches of 40. A byte:
// copied in by the writer and out by the reader, so half of memcpy's rate on a 1 MiB buffer
// (a pipeline slice's working set, in the last-level cache). Bounded: fixed iteration counts.
std::optional<LinkCost> measure_shm_rings();

}  // namespace chorus::cpu
