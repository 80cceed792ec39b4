// SPDX-License-Identifier: BSD-3-Clause
// The price list a group chooses its algorithms by (plan/cost_model.hpp), the same on every
// rank: rank 0 measures its host once (the host's rates and every transport's probe,
// LinkProbe; about 0.1 s, cached per host) or reads them from the cache, and publishes what it
// uses under the group's formation epoch; every other rank reads that. CHORUS_LINK_COSTS (read
// on rank 0): unset or "cached" (the cache, else measure and cache), "measure" (measure again
// and replace the cache), "default" (no measuring: every probe's fallback).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

// CHORUS_LINK_COSTS: "cached", "measure" or "default" (an unknown value is named in a warning
// and taken as "cached").
std::string link_costs_mode();

// Measures this host: memcpy and reduction throughput, its CPUs, and each probe (one that
// fails keeps its fallback). Bounded: fixed iteration counts; the probes are bounded.
PriceList measure_host_prices(const std::vector<LinkProbe>& probes);

// The network's figures from `from_host` to `to_host` as this host measured them last, and
// caching them (best effort), by the two hosts' ids.
std::optional<LinkCost> cached_network(const std::string& from_host, const std::string& to_host);
void cache_network(const std::string& from_host, const std::string& to_host, LinkCost link);

// One figure as text ("<alpha_us>/<gbps>"), and back (nullopt if malformed).
std::string format_link_cost(LinkCost link);
std::optional<LinkCost> parse_link_cost(std::string_view text);

// What the ranks of a group measured of the network between their hosts
// (transports/socket/network_probe.hpp): which ranks probed a link, and this rank's figure
// (nullopt where it has none).
struct NetworkSamples {
  std::vector<int> probers;
  std::optional<LinkCost> mine;
};

// The figure that prices the network for the whole group: the slowest link (the largest round,
// the lowest rate, each on its own), since a flat algorithm's steps wait for the slowest. nullopt
// where no sample has a figure.
std::optional<LinkCost> slowest_link(const std::vector<std::optional<LinkCost>>& samples);

// The price list this group uses: rank 0's host prices, and the network ("network") priced by
// the probers' samples. One store round trip per rank (rank 0 a set, the others a get that
// waits up to `deadline`); in a group over several hosts, each prober other than rank 0 first
// sets its sample, which rank 0 waits for (and removes once it has read the list). A group of
// one rank (no epoch) takes the fallbacks: it runs no algorithm that needs a choice.
PriceList agree_on_prices(Store& store, const std::string& epoch, int rank, Deadline deadline,
                          const std::vector<LinkProbe>& probes, const NetworkSamples& network = {});

}  // namespace chorus::cpu
