// SPDX-License-Identifier: BSD-3-Clause
// Human-readable sizes, durations and rank lists for messages.
#include "core/format.hpp"

namespace chorus {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    return fmt::format("{} B", bytes);
  }
  if (value == static_cast<double>(static_cast<std::uint64_t>(value))) {
    return fmt::format("{} {}", static_cast<std::uint64_t>(value), kUnits[unit]);
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string format_duration(Duration d) {
  const auto ms = d.count();
  if (ms >= 60'000 && ms % 60'000 == 0) {
    return fmt::format("{} min", ms / 60'000);
  }
  return fmt::format("{} ms", ms);
}

std::string format_ranks(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 16;
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) {
    out += fmt::format(" and {} more", ranks.size() - kShown);
  }
  return out;
}

std::string format_on_rank(int rank, int size, std::string_view group) {
  return fmt::format("on rank {}/{} [{}]", rank, size, group);
}

}  // namespace chorus
