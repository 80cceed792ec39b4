// SPDX-License-Identifier: BSD-3-Clause
// fmt helpers for chorus types and human-readable sizes, shared by messages and logs.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <chorus/deadline.hpp>

namespace chorus {

// "64 MiB", "1.5 KiB", "12 B".
std::string format_bytes(std::uint64_t bytes);
// "30000 ms" for sub-minute durations, "10 min" for whole minutes.
std::string format_duration(Duration d);
// "1, 3, 5" (at most 16 shown, then "and N more").
std::string format_ranks(const std::vector<int>& ranks);
// "on rank 1/4 [world]": where an error or log line comes from, after the op that names it
// ("allreduce on rank 1/4 [world]: ..."). Every such message words it the same way through this.
std::string format_on_rank(int rank, int size, std::string_view group);

}  // namespace chorus
