// SPDX-License-Identifier: BSD-3-Clause
// The lobby of a growing group: how processes that want to join a running group
// (join_tcp_group) wait for its members, and how the members' rank 0 lets them in
// (ProcessGroup::grow). Independent of the backend; the store is the only channel.
//
// Keys, under the lobby's namespace:
//   tickets        a counter: a joiner takes the next ticket (add), in arrival order;
//   arrived/<t>    set by joiner t once it holds its ticket (what a waiting admitter waits on);
//   admitted       a counter: the tickets handled so far (only the admitter moves it);
//   seat/<t>       ticket t's fate, written once (compare_set) by whoever gets there first:
//                  "<epoch> <rank>" by the admitter, "withdrawn" by a joiner that gave up,
//                  "closed" by stop_admitting(), "unarrived" by the admitter for a ticket
//                  whose arrived/<t> was missing (taken by no joiner, or by one that then
//                  takes a new ticket);
//   epochs         a counter: each admission that lets someone in gets the next epoch;
//   grow<e>/info   "<size> <timeout ms> <name>": the larger group of epoch e;
//   grow<e>/group  that group's own namespace;
//   grow<e>/given_up  why the members gave that group up before it formed (its joiners, still
//                  forming it, then take a new ticket);
//   closed         why the members stopped admitting.
// Because a seat is written once, a joiner that gave up is never counted in a group, and one
// that was admitted at the moment it gave up takes its seat.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <string>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

namespace chorus::detail {

// The larger group an admission made: its epoch (the namespace "grow<epoch>"), size, default
// op timeout and name.
struct GrownGroup {
  std::int64_t epoch = 0;
  int size = 0;
  Duration timeout{};
  std::string name;
};

// On the members' rank 0: admits every joiner waiting now (waiting up to `wait` for a first
// one), seats them after the `members` ranks and publishes the larger group. `name` empty:
// "<lobby_name>/grow<epoch>". Returns size == members when nobody was let in.
GrownGroup admit_joiners(Store& lobby, const std::string& lobby_name, int members, Duration wait,
                         const std::string& name, Duration timeout);

// In a joiner: takes a ticket and waits up to `wait` to be seated. Returns the group and this
// process's rank in it. Throws Error{aborted} if the members stopped admitting, TimeoutError if
// nobody admitted it in time (its ticket is then withdrawn: it is never seated later).
struct Seat {
  GrownGroup group;
  int rank = 0;
};
Seat wait_for_seat(Store& lobby, const std::string& lobby_name, Duration wait);

// Records that the members gave up the larger group of `epoch` (best effort: never throws), and
// why; grown_given_up() returns that reason, or "" while they have not.
void give_up_grown(Store& lobby, std::int64_t epoch, const std::string& why) noexcept;
std::string grown_given_up(Store& lobby, std::int64_t epoch);

// Refuses every joiner waiting now or later, with `reason`.
void close_lobby(Store& lobby, const std::string& reason);

// The store namespace of a growing group's larger group of `epoch`.
std::string grown_group_namespace(std::int64_t epoch);
// That group's name unless grow() was given one: "<lobby_name>/grow<epoch>".
std::string grown_group_name(const std::string& lobby_name, std::int64_t epoch);

}  // namespace chorus::detail
