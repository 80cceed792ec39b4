// SPDX-License-Identifier: BSD-3-Clause
// See survivor_agreement.hpp. Keys, under the round's namespace: "here" (the ranks that arrived,
// appended as "r,"), "decision" (the survivors, the same form; written once).
#include "core/survivor_agreement.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"

namespace chorus::detail {
namespace {

constexpr const char* kHere = "here";
constexpr const char* kDecision = "decision";
// How often a survivor looks at who has arrived while it waits (the wait for the decision key
// returns at once when another survivor decides first).
constexpr auto kPoll = std::chrono::milliseconds(10);

// "3,0,2," -> {0, 2, 3}: ranks in [0, size) only; anything else in the key is ignored (the store
// is shared with the job: a malformed entry must not make a rank up).
std::vector<int> parse_ranks(const std::string& text, int size) {
  std::set<int> ranks;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) {
      end = text.size();
    }
    const std::string item = text.substr(start, end - start);
    if (!item.empty() && item.size() <= 9 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const int r = std::stoi(item);
      if (r < size) {
        ranks.insert(r);
      }
    }
    start = end + 1;
  }
  return {ranks.begin(), ranks.end()};
}

std::string encode(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) {
    out += fmt::format("{},", r);
  }
  return out;
}

bool contains(const std::vector<int>& sorted, int rank) {
  return std::binary_search(sorted.begin(), sorted.end(), rank);
}

}  // namespace

std::vector<int> agree_on_survivors(Store& store, const SurvivorAgreement& a) {
  store.append(kHere, to_bytes(fmt::format("{},", a.rank)));
  std::vector<int> expected;
  for (int r = 0; r < a.size; ++r) {
    if (!std::count(a.known_dead.begin(), a.known_dead.end(), r)) {
      expected.push_back(r);
    }
  }
  const Deadline grace = Deadline::after(std::min(a.grace, a.deadline.remaining()));
  std::string decision;
  while (decision.empty()) {
    if (store.check({kDecision})) {
      decision = to_string(store.get(kDecision, a.deadline.remaining()));
      break;
    }
    const std::vector<int> here = parse_ranks(to_string(store.get(kHere)), a.size);
    const bool everyone = std::includes(here.begin(), here.end(), expected.begin(), expected.end());
    if (everyone || grace.expired()) {
      // First writer wins; a survivor that lost the race gets the winner's list back.
      decision = to_string(store.compare_set(kDecision, Bytes{}, to_bytes(encode(here))));
      break;
    }
    if (a.deadline.expired()) {
      throw TimeoutError(
          fmt::format("shrink of group [{}] on rank {}/{}: no decision on the survivors within "
                      "the deadline (arrived: {}); check that the store is reachable from every "
                      "survivor, or raise ShrinkOptions::join_timeout",
                      a.group, a.rank, a.size, format_ranks(here)),
          ErrorContext{.rank = a.rank, .size = a.size, .group = a.group, .op = "shrink"});
    }
    try {
      store.wait({kDecision}, kPoll);
    } catch (const TimeoutError&) {
      // Nobody decided yet: look at who has arrived again.
    }
  }
  const std::vector<int> survivors = parse_ranks(decision, a.size);
  if (!contains(survivors, a.rank)) {
    throw Error(ErrorCode::aborted,
                fmt::format("shrink of group [{}]: rank {}/{} was fenced out: the survivors {} "
                            "decided without it (it arrived after they waited {} ms for it: "
                            "stopped, slow or cut off); it takes no part in their group: exit "
                            "this rank, or raise ShrinkOptions::grace if ranks can be that slow",
                            a.group, a.rank, a.size, format_ranks(survivors),
                            std::chrono::duration_cast<std::chrono::milliseconds>(a.grace).count()),
                ErrorContext{.rank = a.rank, .size = a.size, .group = a.group, .op = "shrink"});
  }
  return survivors;
}

}  // namespace chorus::detail
