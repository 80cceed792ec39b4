// SPDX-License-Identifier: BSD-3-Clause
// Why a formation did not complete in time (see formation_timeout.hpp).
#include "cpu/bootstrap/formation_timeout.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "core/format.hpp"

namespace chorus::cpu::formation {
namespace {

// At most this many ranks are named as missing in a timeout message.
constexpr std::size_t kMaxNamedMissing = 32;

// Why a formation did not complete in time, worked out by the first rank to time out and
// shared through the store (`missing`), so that thousands of ranks timing out together make
// one search and one probe of rank 0, not thousands. Recorded as "leader" when rank 0 does not
// answer, else "ranks <more> <r>...": the ranks that never claimed their rank (named up to
// kMaxNamedMissing, `more` counts the rest).
std::string timeout_story(Store& store, const std::string& epoch, const MembershipOptions& o,
                          const Leader* leader) {
  const std::string key = epoch_key(epoch, "missing");
  if (store.add(epoch_key(epoch, "timeouts"), 1) > 1) {
    try {
      return store.get_string(key, std::chrono::seconds(5));
    } catch (const Error&) {
      // Whoever searched is slow or gone: search here too.
    }
  }
  std::string story;
  if (leader && !leader_alive(*leader, o.rank, Deadline::after(kProbeTimeout))) {
    story = "leader";
  } else {
    std::vector<int> missing;
    find_missing(store, epoch, 0, o.size, missing);
    const std::int64_t joined = store.add(epoch_key(epoch, "joined"), 0);
    const std::int64_t more =
        std::max<std::int64_t>(0, o.size - joined - static_cast<std::int64_t>(missing.size()));
    story = fmt::format("ranks {}", missing.size() >= kMaxNamedMissing ? more : 0);
    for (int r : missing) {
      story += fmt::format(" {}", r);
    }
  }
  return to_string(store.compare_set(key, {}, to_bytes(story)));
}

// Every rank has claimed its place, yet the count is short: a rank stopped between its claim
// and its count (died or hung while setting up). The claims cannot say which one.
[[noreturn]] void throw_claimed_not_counted(Store& store, const std::string& epoch,
                                            const MembershipOptions& o) {
  std::string counted = "fewer";
  try {
    counted = std::to_string(store.add(epoch_key(epoch, "joined"), 0));
  } catch (const Error&) {
    // The count is only for the message.
  }
  throw TimeoutError(
      fmt::format("{}: every rank claimed its place in the store, but only {} of {} counted "
                  "themselves in within {}: a rank stopped between the two (it died or hung "
                  "while setting up the group); check the ranks' logs",
                  o.where, counted, o.size, format_duration(o.timeout)),
      timeout_context(o, {}));
}

}  // namespace

// The ranks among [0, size) whose claim record is missing (at most kMaxNamedMissing of them),
// by bisection: one `check` per range, so a few missing ranks cost O(log N) round trips.
void find_missing(Store& store, const std::string& epoch, int lo, int hi, std::vector<int>& out) {
  if (lo >= hi || out.size() >= kMaxNamedMissing) {
    return;
  }
  std::vector<std::string> keys;
  for (int r = lo; r < hi; ++r) {
    keys.push_back(claim_key(epoch, r));
  }
  if (store.check(keys)) {
    return;
  }
  if (hi - lo == 1) {
    out.push_back(lo);
    return;
  }
  const int mid = lo + (hi - lo) / 2;
  find_missing(store, epoch, lo, mid, out);
  find_missing(store, epoch, mid, hi, out);
}

ErrorContext timeout_context(const MembershipOptions& o, std::vector<int> peers) {
  return setup_error_context(o.rank, o.size, o.group, o.timeout, std::move(peers));
}

void throw_formation_timeout(Store& store, const std::string& epoch, const MembershipOptions& o,
                             const Leader* leader) {
  std::string story;
  try {
    story = timeout_story(store, epoch, o, leader);
  } catch (const Error& e) {
    story = fmt::format("unknown ({})", e.what());
  }
  if (story == "leader" && leader) {
    throw TimeoutError(
        fmt::format("{}: the formation's rank 0 (process {} at {}) is gone (it does not answer "
                    "a connection) and no new rank 0 came within {}; check rank 0's log",
                    o.where, leader->who, leader->address, format_duration(o.timeout)),
        timeout_context(o, {0}));
  }
  std::vector<int> missing;
  long more = 0;
  std::string named = "(unknown)";
  if (story.rfind("ranks ", 0) == 0) {
    std::istringstream in(story.substr(6));
    in >> more;
    for (int r; in >> r;) {
      missing.push_back(r);
    }
    if (missing.empty()) {
      throw_claimed_not_counted(store, epoch, o);
    }
    named = format_ranks(missing);
    if (more > 0) {
      named += fmt::format(" and {} more", more);
    }
  }
  throw TimeoutError(
      fmt::format(
          "{}: ranks {} never showed up within {} (they never claimed their rank in the store); "
          "check that they were started with the same store and WORLD_SIZE={}, and "
          "their logs",
          o.where, named, format_duration(o.timeout), o.size),
      timeout_context(o, missing));
}

}  // namespace chorus::cpu::formation
