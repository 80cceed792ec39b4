// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/plan/cost_model.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

namespace chorus::cpu {

LinkCost PriceList::link(std::string_view name, LinkCost fallback) const {
  const auto it = links.find(name);
  return it != links.end() ? it->second : fallback;
}

LinkCosts default_link_costs() noexcept {
  LinkCosts c;
  c.same_host = {3.3, 22.7};
  c.other_host = {25.0, 1.25};  // 10 Gbit/s
  c.peer_copy_gbps = 13.0;
  c.memcpy_gbps = 45.0;
  c.reduce_gbps = 38.0;
  c.host_cpus = 2;
  return c;
}

std::string format_prices(const PriceList& p) {
  std::string out = fmt::format("v2 memcpy={:.3f} reduce={:.3f} cpus={}", p.memcpy_gbps,
                                p.reduce_gbps, p.host_cpus);
  for (const auto& [name, link] : p.links) {
    out += fmt::format(" {}={:.3f}/{:.3f}", name, link.alpha_us, link.gbps);
  }
  return out;
}

namespace {

bool valid_rate(double v) { return v > 0 && std::isfinite(v); }

// A name of the price list: a transport's, short and plain (it is a token of the line).
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 32) {
    return false;
  }
  for (char ch : name) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<PriceList> parse_prices(std::string_view text) {
  PriceList p;
  p.links.clear();
  std::istringstream in{std::string(text)};
  std::string token;
  if (!(in >> token) || token != "v2") {
    return std::nullopt;
  }
  const std::string s(text);
  int used = 0;
  if (std::sscanf(s.c_str(), "v2 memcpy=%lf reduce=%lf cpus=%lf%n", &p.memcpy_gbps, &p.reduce_gbps,
                  &p.host_cpus, &used) != 3 ||
      !valid_rate(p.memcpy_gbps) || !valid_rate(p.reduce_gbps) || !(p.host_cpus >= 1) ||
      !std::isfinite(p.host_cpus)) {
    return std::nullopt;
  }
  std::istringstream rest(s.substr(static_cast<std::size_t>(used)));
  while (rest >> token) {
    const std::size_t eq = token.find('=');
    if (eq == std::string::npos) {
      return std::nullopt;
    }
    const std::string name = token.substr(0, eq);
    LinkCost link;
    int end = 0;
    const std::string value = token.substr(eq + 1);
    if (!valid_name(name) || p.links.count(name) != 0 ||
        std::sscanf(value.c_str(), "%lf/%lf%n", &link.alpha_us, &link.gbps, &end) != 2 ||
        static_cast<std::size_t>(end) != value.size() || !(link.alpha_us >= 0) ||
        !std::isfinite(link.alpha_us) || !valid_rate(link.gbps)) {
      return std::nullopt;
    }
    p.links.emplace(name, link);
  }
  return p;
}

std::string format_link_costs(const LinkCosts& c) {
  return fmt::format(
      "same_host={:.3f}/{:.3f} other_host={:.3f}/{:.3f} peer_copy={:.3f} memcpy={:.3f} "
      "reduce={:.3f} cpus={} (alpha_us/GBps)",
      c.same_host.alpha_us, c.same_host.gbps, c.other_host.alpha_us, c.other_host.gbps,
      c.peer_copy_gbps, c.memcpy_gbps, c.reduce_gbps, c.host_cpus);
}

}  // namespace chorus::cpu
