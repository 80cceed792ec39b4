// SPDX-License-Identifier: BSD-3-Clause
// Why a formation did not complete in time: the ranks that never published an address (found
// by bisection over the address records), or a rank 0 that is gone. Worked out once by the
// first rank to time out and shared through the store (`missing`), so that thousands of ranks
// timing out together make one search and one probe of rank 0, not thousands.
//
// Separate from membership.cpp because it runs only on the failure path and has its own
// record and search.
#pragma once

#include "core/private.hpp"

#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "cpu/bootstrap/formation_records.hpp"
#include "cpu/bootstrap/membership.hpp"

namespace chorus::cpu::formation {

// Appends to `out` the ranks among [lo, hi) whose claim record is missing (at most 32 named
// in all), by bisection: one `check` per range, so a few missing ranks cost O(log N) round trips.
void find_missing(Store& store, const std::string& epoch, int lo, int hi, std::vector<int>& out);

// The context of a setup timeout naming `peers`.
ErrorContext timeout_context(const MembershipOptions& o, std::vector<int> peers);

// Throws the TimeoutError of formation `epoch`: its rank 0 is gone (`leader`, when known and
// probed dead), or the ranks that never showed up.
[[noreturn]] void throw_formation_timeout(Store& store, const std::string& epoch,
                                          const MembershipOptions& o, const Leader* leader);

}  // namespace chorus::cpu::formation
