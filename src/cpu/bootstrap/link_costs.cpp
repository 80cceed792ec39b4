// SPDX-License-Identifier: BSD-3-Clause
// Measuring a host's prices, caching them per host (and the network's per pair of hosts), and
// agreeing on one price list in a group.
#include "cpu/bootstrap/link_costs.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/env.hpp"
#include "core/logging.hpp"
#include "core/reduce.hpp"
#include "cpu/bootstrap/host_id.hpp"
#include "cpu/bootstrap/membership.hpp"

namespace chorus::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The fastest of `reps` runs of `body` (the machine is shared: the fastest run is the one
// least disturbed), in seconds.
double fastest(int reps, const std::function<void()>& body) {
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    body();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Buffers the size of a pipeline slice's working set, so the figures are those of data in
// the last-level cache, as a slice moving through the rings is.
constexpr std::size_t kProbeBytes = 1 << 20;
constexpr int kBandwidthReps = 8;

double memcpy_gbps() {
  std::vector<std::byte> a(kProbeBytes, std::byte{1}), b(kProbeBytes);
  const double s = fastest(kBandwidthReps, [&] { std::memcpy(b.data(), a.data(), kProbeBytes); });
  return kProbeBytes / s / 1e9;
}

double reduce_gbps() {
  std::vector<float> a(kProbeBytes / sizeof(float), 1.0f), b(a.size(), 2.0f);
  const double s = fastest(kBandwidthReps, [&] {
    reduce(b.data(), b.data(), a.data(), a.size(), DataType::float32, ReduceOp::sum);
  });
  return kProbeBytes / s / 1e9;
}

std::optional<std::filesystem::path> cache_file(const std::string& name) {
  std::filesystem::path dir;
  if (const auto xdg = env::get("XDG_CACHE_HOME")) {
    dir = *xdg;
  } else if (const auto home = env::get("HOME")) {
    dir = std::filesystem::path(*home) / ".cache";
  } else {
    return std::nullopt;
  }
  return dir / "chorus" / name;
}

std::string hash_of(const std::string& s) {
  return fmt::format("{:016x}", std::hash<std::string>{}(s));
}

std::optional<std::string> read_cache(const std::string& name) {
  const auto file = cache_file(name);
  if (!file) {
    return std::nullopt;
  }
  std::ifstream in(*file);
  std::string line;
  if (!std::getline(in, line)) {
    return std::nullopt;
  }
  return line;
}

// Best effort: written whole under a temporary name, then renamed, so concurrent groups on
// the host never read half a file.
void write_cache(const std::string& name, const std::string& line) {
  const auto file = cache_file(name);
  if (!file) {
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(file->parent_path(), ec);
  const auto tmp = file->string() + fmt::format(".{}", ::getpid());
  {
    std::ofstream out(tmp);
    out << line << '\n';
    if (!out) {
      return;
    }
  }
  std::filesystem::rename(tmp, *file, ec);
}

std::string host_cache_name() { return "prices-" + hash_of(local_host_id()); }

// The price list without measuring: every probe's fallback.
PriceList fallback_prices(const std::vector<LinkProbe>& probes) {
  PriceList p;
  for (const LinkProbe& probe : probes) {
    p.links.emplace(probe.name, probe.fallback);
  }
  return p;
}

bool lists_every_probe(const PriceList& p, const std::vector<LinkProbe>& probes) {
  return std::all_of(probes.begin(), probes.end(),
                     [&](const LinkProbe& probe) { return p.links.count(probe.name) != 0; });
}

// What rank 0 uses, by CHORUS_LINK_COSTS.
PriceList choose_local(const std::vector<LinkProbe>& probes) {
  const std::string mode = link_costs_mode();
  if (mode == "default") {
    return fallback_prices(probes);
  }
  if (mode == "cached") {
    if (const auto line = read_cache(host_cache_name())) {
      if (auto cached = parse_prices(*line); cached && lists_every_probe(*cached, probes)) {
        return *cached;
      }
    }
  }
  const auto t0 = Clock::now();
  const PriceList measured = measure_host_prices(probes);
  CHORUS_INFO(coll, "host prices measured in {:.1f} ms: {}", seconds_since(t0) * 1e3,
              format_prices(measured));
  write_cache(host_cache_name(), format_prices(measured));
  return measured;
}

// Once per process: every later group (each split, each torch new_group) on rank 0 of this
// process reuses the figures instead of reading the cache file, or probing, again (unless it
// asks for a probe the list does not have).
PriceList local_choice(const std::vector<LinkProbe>& probes) {
  static std::mutex mutex;
  static std::optional<PriceList> chosen;
  std::lock_guard<std::mutex> lock(mutex);
  if (!chosen || !lists_every_probe(*chosen, probes)) {
    chosen = choose_local(probes);
  }
  return *chosen;
}

std::string network_cache_name(const std::string& from_host, const std::string& to_host) {
  return fmt::format("network-{}-{}", hash_of(from_host), hash_of(to_host));
}

}  // namespace

std::string link_costs_mode() {
  const std::string mode = env::get("CHORUS_LINK_COSTS").value_or("cached");
  if (mode != "default" && mode != "measure" && mode != "cached") {
    CHORUS_WARN(coll, "CHORUS_LINK_COSTS='{}' is not default, measure or cached; using cached",
                mode);
    return "cached";
  }
  return mode;
}

PriceList measure_host_prices(const std::vector<LinkProbe>& probes) {
  PriceList p;
  p.memcpy_gbps = memcpy_gbps();
  p.reduce_gbps = reduce_gbps();
  p.host_cpus = static_cast<double>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  for (const LinkProbe& probe : probes) {
    const std::optional<LinkCost> measured = probe.measure ? probe.measure() : std::nullopt;
    p.links[probe.name] = measured.value_or(probe.fallback);
  }
  return p;
}

std::optional<LinkCost> cached_network(const std::string& from_host, const std::string& to_host) {
  const auto line = read_cache(network_cache_name(from_host, to_host));
  if (!line) {
    return std::nullopt;
  }
  return parse_link_cost(*line);
}

void cache_network(const std::string& from_host, const std::string& to_host, LinkCost link) {
  write_cache(network_cache_name(from_host, to_host), format_link_cost(link));
}

std::string format_link_cost(LinkCost link) {
  return fmt::format("{:.3f}/{:.3f}", link.alpha_us, link.gbps);
}

std::optional<LinkCost> parse_link_cost(std::string_view text) {
  // Through the list's parser, so that one rule says what a valid figure is.
  const auto p = parse_prices(fmt::format("v2 memcpy=1 reduce=1 cpus=1 x={}", text));
  if (!p || p->links.size() != 1) {
    return std::nullopt;
  }
  return p->links.begin()->second;
}

std::optional<LinkCost> slowest_link(const std::vector<std::optional<LinkCost>>& samples) {
  std::optional<LinkCost> out;
  for (const auto& s : samples) {
    if (!s) {
      continue;
    }
    if (!out) {
      out = *s;
    } else {
      out->alpha_us = std::max(out->alpha_us, s->alpha_us);
      out->gbps = std::min(out->gbps, s->gbps);
    }
  }
  return out;
}

namespace {

std::string sample_key(const std::string& epoch, int rank) {
  return epoch_key(epoch, fmt::format("network_sample/{}", rank));
}

// Rank 0: every prober's sample (its own without the store), waiting up to `deadline`.
std::vector<std::optional<LinkCost>> gather_samples(Store& store, const std::string& epoch,
                                                    Deadline deadline,
                                                    const NetworkSamples& network) {
  std::vector<std::string> keys;
  std::vector<std::optional<LinkCost>> samples;
  for (int r : network.probers) {
    if (r == 0) {
      samples.push_back(network.mine);
    } else {
      keys.push_back(sample_key(epoch, r));
    }
  }
  if (keys.empty()) {
    return samples;
  }
  for (const Bytes& value : store.multi_get(keys, deadline.remaining())) {
    samples.push_back(parse_link_cost(to_string(value)));  // "-": the prober had no figure
  }
  return samples;
}

}  // namespace

PriceList agree_on_prices(Store& store, const std::string& epoch, int rank, Deadline deadline,
                          const std::vector<LinkProbe>& probes, const NetworkSamples& network) {
  if (epoch.empty()) {
    return fallback_prices(probes);  // one rank: nothing to choose, nothing to measure
  }
  // One of the formation's records: the last member out removes it with the others
  // (leave_group), so no key outlives its group.
  const std::string key = epoch_key(epoch, kLinkCostsRecord);
  const bool probed =
      std::find(network.probers.begin(), network.probers.end(), rank) != network.probers.end();
  if (rank == 0) {
    PriceList prices = local_choice(probes);
    if (const auto net = slowest_link(gather_samples(store, epoch, deadline, network))) {
      prices.links[kNetworkPriceName] = *net;
    }
    // What the others will parse, to the digit: a figure that differed in its last bit could
    // tip a choice at a crossover.
    const std::string line = format_prices(prices);
    store.set(key, line);
    return parse_prices(line).value_or(fallback_prices(probes));
  }
  if (probed) {
    store.set(sample_key(epoch, rank), network.mine ? format_link_cost(*network.mine) : "-");
  }
  const std::string text = to_string(store.get(key, deadline.remaining()));
  if (probed) {
    store.delete_key(sample_key(epoch, rank));  // rank 0 has read it: the list is out
  }
  const auto prices = parse_prices(text);
  if (!prices) {
    // Same build on every rank, so only a foreign writer gets here: use what every rank can.
    CHORUS_WARN(coll, "rank 0's price list '{}' is malformed; using the fallbacks", text);
    return fallback_prices(probes);
  }
  return *prices;
}

}  // namespace chorus::cpu
