// SPDX-License-Identifier: BSD-3-Clause
// Clashes in group setup: two processes claiming one rank, different world sizes, two jobs on
// one store and run id. A clash is the formation's outcome (every member fails at once with
// the same message) and is also remembered for the whole namespace (kClashKey), because the
// process that clashed may be the rank another formation waits for; a rank waiting there gives
// up kClashGrace after it sees a recent one (ClashWatch).
//
// Separate from membership.cpp because it is the one piece of setup that looks beyond the
// rank's own formation, with its own record and time window.
#pragma once

#include "core/private.hpp"

#include <string>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

namespace chorus::cpu::formation {

// A clash recorded in the group's namespace (kClashKey) less than this long ago counts as
// part of the current launch; an older one is an earlier launch's and is ignored.
inline constexpr std::chrono::milliseconds kClashMemory = std::chrono::seconds(60);
// Once a rank waiting in group setup has seen such a clash, it waits at most this much longer
// for the ranks it misses: the processes that clashed have failed and will not come, and a
// relaunch right after a clash still forms if its ranks start within this of each other.
inline constexpr Duration kClashGrace = std::chrono::seconds(5);

// Records a clash for the whole namespace (best effort).
void remember_clash(Store& store, const std::string& message);
// The message of a clash recorded in this namespace within kClashMemory, or "".
std::string recent_clash(Store& store);

// A waiting rank's view of the namespace's clash record: once a recent clash is seen, the
// wait ends kClashGrace later (give_up() returns the clash then).
class ClashWatch {
 public:
  // Looks at the record now and then every `every` calls of give_up().
  explicit ClashWatch(int every) : every_(every) {}

  std::string give_up(Store& store);

 private:
  int every_;
  int calls_ = 0;
  std::string message_;
  Deadline grace_ = Deadline::never();
};

// Records the clash as the formation's outcome (unless it already has one) and, with
// `remember`, for the namespace; then throws it as InvalidArgument.
[[noreturn]] void clash(Store& store, const std::string& epoch, const std::string& message,
                        bool remember = true);

// What every clash message ends with: how to run processes that do not clash.
std::string clash_advice();

}  // namespace chorus::cpu::formation
