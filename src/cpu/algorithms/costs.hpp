// SPDX-License-Identifier: BSD-3-Clause
// The costs and applicability predicates the algorithms' registry rows name (registry.hpp):
// predicted microseconds under the group's α/β figures (cost_model.hpp), compared only among
// the algorithms of one op. An algorithm file with a cost of its own defines it next to its
// builder; these are the ones several algorithms share, or whose arithmetic others reuse.
#pragma once

#include "cpu/algorithms/registry.hpp"

namespace chorus::cpu {

// Runs everywhere / may always be the default.
bool always(const Selection&);
// The cost of an op's only algorithm: nothing to choose between.
double free_of_choice(const Selection&);

// ---- allreduce ----
double ring_allreduce_us(const Selection& s);
double recursive_doubling_us(const Selection& s);
double halving_doubling_us(const Selection& s);
// Several hosts, several ranks on one of them (and not avg, which would divide in every phase).
bool hierarchical_runs(const Selection& s);
double hierarchical_us(const Selection& s);

// ---- allgather and reduce_scatter (bytes: one rank's block) ----
double ring_block_us(const Selection& s);

// ---- broadcast and reduce ----
double tree_us(const Selection& s);
double chain_us(const Selection& s);

// ---- the single-copy algorithms (direct.cpp) ----
// Where the ranks can reach each other's memory (GroupOptions::peer_memory).
bool direct_runs(const Selection& s);
// Only between SharedBuffers, from kSharedBufferMinBytes (costs.cpp says why).
bool direct_may_be_default(const Selection& s);
double direct_allreduce_us(const Selection& s);
double direct_block_us(const Selection& s);
double direct_broadcast_us(const Selection& s);

}  // namespace chorus::cpu
