// SPDX-License-Identifier: BSD-3-Clause
// Group membership through the store: which processes form this group, at which addresses.
//
// A group's store namespace may hold records of an earlier launch (same run id after a crash)
// or be shared by mistake (two jobs, a duplicate RANK, a different WORLD_SIZE). Membership
// is therefore organised in formations ("epochs"), each led by one live rank 0:
//   current              the epoch of the formation rank 0 leads now (16 hex digits)
//   e<epoch>/leader      "<world size> <group id> <pid>@<host> <rank 0's host:port> <secret>"
//                        (secret: 64 hex digits, the formation's key for the mesh handshake's
//                        membership proofs; whoever can read the store can read it)
//   e<epoch>/claim/<r>   counter: how many processes claimed rank r in this formation
//   e<epoch>/addr/<r>    rank r's "host:port" and, after a space, its host id (host_id.hpp)
//   e<epoch>/member/<r>  "<world size> <pid>@<host>" (for messages)
//   e<epoch>/clash       why this formation cannot form (a duplicate rank, ...)
//   e<epoch>/gone        "<rank> <message>": a member found that rank gone during setup
// Rank 0 always starts a new epoch (so a relaunch never reuses a dead formation). A rank r > 0
// joins the current epoch only once its rank 0 answers a connection (a leader record left by
// a dead process is skipped: wait for the next epoch). Every clash is written to the epoch's
// clash key, so every member fails at once with the same message. A formation that never
// completes keeps its records (the others' "never showed up" lists stay true while they time
// out; a relaunch starts a new epoch and ignores them).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

#include "tcp/handshake.hpp"

namespace chorus::tcp {

struct MembershipOptions {
  int rank = 0;
  int size = 1;
  std::string where;    // "tcp group setup on rank 1/4 [world]" for messages
  std::string group;    // group name, for error contexts
  Duration timeout{0};  // the group timeout, for messages
  Deadline deadline = Deadline::never();
  std::string local_address;  // our "host:port"
  std::string host_id;        // which machine we run on (host_id.hpp): picks same-host peers
  // Called between the slices of every wait (rank 0 drains its listener there, so that a
  // large group's liveness probes never fill its backlog).
  std::function<void()> between_slices;
};

struct Membership {
  std::string epoch;  // empty for a group of one (no store records)
  std::uint64_t group_id = 0;
  std::vector<std::string> addresses;  // by rank
  std::vector<std::string> host_ids;   // by rank ("" where a rank published none)
  GroupSecret secret{};                // proves membership in the mesh handshake
};

// Publishes this rank and waits until every rank of the formation has. Throws TimeoutError
// naming the ranks that never showed up, or InvalidArgument naming a clash (duplicate rank,
// different world size, two rank 0s: another job on the same store and run id).
Membership join_group(Store& store, const MembershipOptions& options);

// Throws InvalidArgument if a clash was recorded for the formation since it was joined.
void check_no_clash(Store& store, const Membership& membership);

// Records that `rank` is gone (its published address refuses connections), so that every
// member names the root cause, not the members that left because of it. Best effort.
void record_gone(Store& store, const Membership& membership, int rank, const std::string& message);
// The rank and message of a recorded departure, if any.
std::optional<std::pair<int, std::string>> recorded_gone(Store& store,
                                                         const Membership& membership);

// Removes this rank's records (rank 0: also the leader record and `current`). Best effort:
// never throws. A destroyed group leaves no keys behind.
void leave_group(Store& store, const Membership& membership, int rank) noexcept;

// True if a process accepts connections at `address` (a rank's published one): its listener
// is open, so it is alive (it may still be stopped or slow). False if refused or unreachable
// within `deadline`: the process is gone. The connection says it is a probe (a hello on
// kProbeChannel), which the rank drops quietly.
bool answers_at(const std::string& address, std::uint64_t group_id, int my_rank, int size,
                Deadline deadline);

// Key helpers (tests locate a rank's address through them).
std::string epoch_key(const std::string& epoch, const std::string& name);
inline constexpr const char* kCurrentEpochKey = "current";

// "<pid>@<hostname>" of this process (no spaces: a record field), and "process <pid>@<host>"
// for messages that must tell processes apart.
std::string pid_at_host();
std::string process_identity();

}  // namespace chorus::tcp
