// SPDX-License-Identifier: BSD-3-Clause
// What the socket transport costs: over loopback tcp between ranks of one host ("socket",
// measured on the host), and across the network between hosts ("network", measured between
// ring neighbours when a group forms: network_probe.hpp).
#pragma once

#include <optional>

#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

// Where nothing was measured: the medians of the loopback probe on the 2-core VM the project
// is developed on, and 10 Gbit/s Ethernet between hosts.
inline constexpr LinkCost kSocketFallback{9.6, 7.5};
inline constexpr LinkCost kNetworkFallback{25.0, 1.25};

// Half a 1-byte round trip (median of 30 per batch, median of three batches), and the
// throughput of a 1 MiB stream (the fastest), over a loopback tcp pair this process makes.
// Bounded: every wait has a 1 s timeout; nullopt if any part fails.
std::optional<LinkCost> measure_loopback_tcp();

}  // namespace chorus::cpu
