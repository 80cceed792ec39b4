// SPDX-License-Identifier: BSD-3-Clause
// What the one-sided capability's reads and writes cost between ranks of one host
// ("peer_copy" in the price list: only its rate counts, its rounds are the host link's).
#pragma once

#include <optional>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

// Where nothing was measured: the probe's figure on the 2-core VM the project is developed on.
inline constexpr LinkCost kPeerCopyFallback{0.0, 13.0};

// process_vm_readv from this process, 1 MiB in the direct algorithms' 128 KiB pieces, the
// fastest of eight. nullopt where the kernel refuses it.
std::optional<LinkCost> measure_peer_copy();

}  // namespace chorus::cpu
