// SPDX-License-Identifier: BSD-3-Clause
// Clashes in group setup (see formation_clash.hpp).
#include "cpu/bootstrap/formation_clash.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "cpu/bootstrap/formation_records.hpp"
#include "cpu/bootstrap/membership.hpp"

namespace chorus::cpu::formation {

// Records a clash for the whole namespace as well as in its formation: a clashing process
// may meet another formation than the one its own rank 0 leads (another job's, or one that is
// replaced a moment later), and the ranks waiting elsewhere learn of it only here.
void remember_clash(Store& store, const std::string& message) {
  try {
    store.set(kClashKey, fmt::format("{} {}", wall_clock_ms(), message));
  } catch (const Error&) {
    // The formation's own state still carries it.
  }
}

// The message of a clash recorded in this namespace within kClashMemory, or "".
std::string recent_clash(Store& store) {
  const std::string record = peek(store, kClashKey);
  const std::size_t space = record.find(' ');
  if (space == std::string::npos) {
    return {};
  }
  const auto at = env::parse_integer(std::string_view(record).substr(0, space));
  // A clock a little behind or ahead on another host only shifts the window.
  if (!at || std::llabs(wall_clock_ms() - *at) > kClashMemory.count()) {
    return {};
  }
  return record.substr(space + 1);
}

// Records the clash as the formation's outcome (unless it already has one), then throws it.
void clash(Store& store, const std::string& epoch, const std::string& message, bool remember) {
  try {
    store.compare_set(epoch_key(epoch, "state"), {}, to_bytes("clash " + message));
  } catch (const Error&) {
    // The message still reaches this rank's caller.
  }
  if (remember) {
    remember_clash(store, message);
  }
  throw InvalidArgument(message);
}

std::string clash_advice() {
  return "each process of a job needs a distinct RANK in [0, WORLD_SIZE) and the same WORLD_SIZE, "
         "and two jobs that share a store need distinct CHORUS_RUN_IDs";
}

std::string ClashWatch::give_up(Store& store) {
  if (message_.empty() && calls_++ % every_ == 0) {
    message_ = recent_clash(store);
    if (!message_.empty()) {
      grace_ = Deadline::after(kClashGrace);
    }
  }
  return !message_.empty() && grace_.expired() ? message_ : std::string();
}

}  // namespace chorus::cpu::formation
