// SPDX-License-Identifier: BSD-3-Clause
// The α/β figures a group chooses its algorithms by (plan/cost_model.hpp), the same on
// every rank: rank 0 measures its host's links once (a probe of about 0.1 s, cached per host) or
// reads them from the cache, and publishes what it uses under the group's formation epoch; every
// other rank reads that. CHORUS_LINK_COSTS (read on rank 0): unset or "cached" (the cache, else
// measure and cache), "measure" (measure again and replace the cache), "default" (no measuring:
// default_link_costs()).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

// Measures this host: memcpy, reduction and process_vm_readv throughput, the wake-up of a
// thread waiting on a futex (a round through shared memory) and a loopback tcp round trip and
// stream. Bounded: fixed iteration counts, and every socket wait has a 1 s timeout (a part
// that fails keeps its default).
LinkCosts measure_link_costs();

// The figures as one line of text ("v1 shm=<alpha_us>/<gbps> ..."), and back (nullopt if
// malformed).
std::string format_link_costs(const LinkCosts& costs);
std::optional<LinkCosts> parse_link_costs(std::string_view text);

// The figures this group uses. One store round trip per rank (rank 0 a set, the others a get
// that waits up to `deadline`); a group of one rank (no epoch) takes the defaults: it runs no
// algorithm that needs a choice.
LinkCosts agree_on_link_costs(Store& store, const std::string& epoch, int rank, Deadline deadline);

}  // namespace chorus::cpu
