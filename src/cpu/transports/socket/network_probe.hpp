// SPDX-License-Identifier: BSD-3-Clause
// The network's price, measured when a group forms: every rank whose next ring neighbour is on
// another host times the link to it (a few 1-byte round trips and two 512 KiB streams over the
// setup link's first data socket, a few milliseconds), while it answers its previous
// neighbour's probe. The figures go to the group's agreement (link_costs.hpp:
// agree_on_prices), which takes the slowest link for every rank alike. Each rank caches what
// it measured per pair (this host, the neighbour's address), as the host's own prices are.
//
// CHORUS_NETWORK_PROBE=off skips the probe: the cached figure where there is one, else the
// fallback (10 Gbit/s). CHORUS_LINK_COSTS=default skips it too (no figure at all);
// CHORUS_LINK_COSTS=measure probes again and replaces the cache. Whichever, the prober tells
// its neighbour in the first byte whether a probe follows, so ranks whose settings differ
// never wait for each other.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

struct Mesh;

// Whether `rank` probes its next ring neighbour: that one is on another host (`host_of`: a
// host index by rank), and with two ranks (where next and previous are one rank, and one link)
// only the lower rank probes. The same answer on every rank.
bool probes_next_neighbour(int rank, int size, const std::vector<int>& host_of);

// The ranks that probe (probes_next_neighbour), in order.
std::vector<int> network_probers(int size, const std::vector<int>& host_of);

// Probes the link to the next ring neighbour where this rank does, and answers the previous
// neighbour's probe where that one does, at once. Returns this rank's figure (nullopt where it
// probes nothing, or where the probe is skipped and nothing is cached). Every wait ends by
// `deadline`; a link that fails or falls silent meanwhile throws NetworkError naming the peer
// (the link's stream would be left half-read).
std::optional<LinkCost> probe_ring_network(Mesh& mesh, int rank, int size,
                                           const std::vector<int>& host_of, Deadline deadline);

}  // namespace chorus::cpu
