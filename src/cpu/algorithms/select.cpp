// SPDX-License-Identifier: BSD-3-Clause
// Picking an algorithm: the forced one (CHORUS_ALGO, parsed once into ids), else the cheapest
// of the op's registered algorithms that applies (registry.cpp) under the group's agreed α/β
// figures, as the group's transport stack priced them (transport_stack.hpp). World size 1 is a
// local copy.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chorus/errors.hpp>

#include "core/check.hpp"
#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {
namespace {

// A group of one rank: the output is the input (avg over one rank is the value itself), so
// copying the input to the output, where the op has both and they differ, is every op's
// result. The ops with counts per rank lay theirs out by the counts: their own algorithm
// handles one rank.
void build_single_rank(Schedule& s, const CollectiveArgs& a) {
  if (a.in_counts != nullptr || a.out_counts != nullptr) {
    return algorithms_of(a.kind).front().build(s, a);
  }
  if (a.in != nullptr && a.out != nullptr) {
    s.copy(a.out, a.in, a.count * element_size(a.dtype));
  }
}

bool may_be_default(const AlgorithmSpec& spec, const Selection& sel) {
  return spec.may_be_default(sel) && (!spec.latency || sel.bytes <= sel.small_bytes) &&
         spec.runs(sel);
}

// The cheapest default candidate; nullptr only for an op without algorithms.
const AlgorithmSpec* cheapest(const Selection& sel) {
  const AlgorithmSpec* best = nullptr;
  double best_us = std::numeric_limits<double>::infinity();
  for (const AlgorithmSpec& spec : algorithms_of(sel.kind)) {
    if (!may_be_default(spec, sel)) {
      continue;
    }
    const double us = spec.cost_us(sel);
    if (best == nullptr || us < best_us) {
      best = &spec;
      best_us = us;
    }
  }
  return best;
}

// The op called `name` that has algorithms (every collective; send and recv have none).
std::optional<OpType> find_op(const std::string& name) {
  for (int t = 0; t < kNumOpTypes; ++t) {
    const auto kind = static_cast<OpType>(t);
    if (name == to_string(kind) && !algorithms_of(kind).empty()) {
      return kind;
    }
  }
  return std::nullopt;
}

const AlgorithmSpec& spec_of(const CollectiveArgs& a, AlgorithmId id) {
  const AlgorithmSpec* spec = find_algorithm(a.kind, id);
  CHORUS_CHECK(spec != nullptr, "{} has no algorithm {}", to_string(a.kind), algorithm_name(id));
  return *spec;
}

}  // namespace

AlgorithmOverrides parse_algorithm_overrides(const std::string& text) {
  AlgorithmOverrides out{};
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string entry = text.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = entry.find('=');
    const std::string op = entry.substr(0, eq);
    const std::string name = eq == std::string::npos ? "" : entry.substr(eq + 1);
    // The ops CHORUS_ALGO names are those with registered algorithms.
    const auto kind = find_op(op);
    if (!kind) {
      throw InvalidArgument(fmt::format(
          "CHORUS_ALGO='{}': '{}' names no collective; use op=algorithm entries separated by "
          "commas, e.g. allreduce=ring,broadcast=tree",
          text, entry));
    }
    const AlgorithmSpec* spec = find_algorithm(*kind, name);
    if (spec == nullptr) {
      std::vector<const char*> names;
      for (const AlgorithmSpec& a : algorithms_of(*kind)) {
        names.push_back(algorithm_name(a.id));
      }
      throw InvalidArgument(fmt::format("CHORUS_ALGO='{}': {} has no algorithm '{}'; it has {}",
                                        text, op, name, fmt::join(names, ", ")));
    }
    out[static_cast<std::size_t>(*kind)] = spec->id;
  }
  return out;
}

Selection selection_of(int size, const CollectiveArgs& a) {
  static const LinkCosts defaults = default_link_costs();
  Selection sel;
  sel.kind = a.kind;
  sel.op = a.op;
  sel.size = size;
  sel.bytes = static_cast<double>(a.count * element_size(a.dtype));
  sel.slice_bytes = static_cast<double>(std::max<std::size_t>(1, a.slice_bytes));
  sel.small_bytes = static_cast<double>(a.small_bytes);
  sel.hosts = a.hosts;
  sel.peer_memory = a.peer_memory;
  sel.shared_buffers = a.shared_buffers;
  sel.costs = a.costs != nullptr ? a.costs : &defaults;
  return sel;
}

AlgorithmId select_algorithm(int size, const CollectiveArgs& a) {
  if (size == 1) {
    return AlgorithmId::local;
  }
  const Selection sel = selection_of(size, a);
  if (a.forced != AlgorithmId::automatic) {
    const AlgorithmSpec* forced = find_algorithm(a.kind, a.forced);
    if (forced != nullptr && forced->runs(sel)) {
      return a.forced;
    }
  }
  const AlgorithmSpec* best = cheapest(sel);
  CHORUS_CHECK(best != nullptr, "no algorithm for {}", to_string(a.kind));
  return best->id;
}

const char* choose_algorithm(int size, const CollectiveArgs& a) {
  return algorithm_name(select_algorithm(size, a));
}

bool needs_memory_agreement(int size, const CollectiveArgs& a) noexcept {
  // Forced, the algorithm is known (direct maps what it can and reaches the rest by read and
  // write tasks); in a second phase, it was agreed.
  return size > 1 && a.peer_memory && a.keys == nullptr && a.forced == AlgorithmId::automatic &&
         maps_shared_buffers(a.kind) && a.count * element_size(a.dtype) >= kSharedBufferMinBytes;
}

void build_schedule(Schedule& s, const CollectiveArgs& a) {
  s.set_wire(a.wire, a.hosts != nullptr ? &a.hosts->host_of : nullptr);
  if (a.num_parts != 0) {
    return build_coalesced(s, a);
  }
  if (needs_memory_agreement(s.size(), a)) {
    return build_memory_agreement(s, a);
  }
  build_chosen(s, a);
}

void build_chosen(Schedule& s, const CollectiveArgs& a) {
  const AlgorithmId id = select_algorithm(s.size(), a);
  s.set_algorithm(algorithm_name(id));
  if (id == AlgorithmId::local) {
    return build_single_rank(s, a);
  }
  spec_of(a, id).build(s, a);
}

std::string describe_choices(int size, const CollectiveArgs& group,
                             const std::vector<std::size_t>& sizes) {
  std::string out;
  for (int t = 0; t < kNumOpTypes; ++t) {
    const auto kind = static_cast<OpType>(t);
    if (algorithms_of(kind).size() < 2) {
      continue;  // one algorithm: nothing is chosen
    }
    for (std::size_t bytes : sizes) {
      CollectiveArgs a = group;
      a.kind = kind;
      a.dtype = DataType::uint8;
      a.count = bytes;
      const Selection sel = selection_of(size, a);
      std::vector<std::string> costs;
      for (const AlgorithmSpec& spec : algorithms_of(kind)) {
        if (may_be_default(spec, sel)) {
          costs.push_back(fmt::format("{} {:.1f}", algorithm_name(spec.id), spec.cost_us(sel)));
        }
      }
      out += fmt::format("{:<15} {:>10} {:<18} ({} us)\n", to_string(kind), bytes,
                         choose_algorithm(size, a), fmt::join(costs, ", "));
    }
  }
  return out;
}

}  // namespace chorus::cpu
