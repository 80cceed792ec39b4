// SPDX-License-Identifier: BSD-3-Clause
// Group membership through the store: which processes form this group, at which addresses.
//
// A group's store namespace may hold records of an earlier launch (same run id after a crash)
// or be shared by mistake (two jobs, a duplicate RANK, a different WORLD_SIZE). Membership
// is therefore organised in formations ("epochs"), each led by one live rank 0:
//   current              "<epoch> <leader>": the formation rank 0 leads now (16 hex digits)
//                        and its leader record "<world size> <group id> <pid>@<host>
//                        <rank 0's host:port> <seed> <key>" (seed: 64 hex digits; key:
//                        "open" when rank 0 had no job token, and the seed is then the
//                        formation's key for the handshake's membership proofs, readable by
//                        whoever can read the store; else "token:<check>", and every rank
//                        derives the key from its job token and the seed (group_key.hpp))
//   e<epoch>/claim/<r>   "<world size> <pid>@<host> <host:port> <host id>": the process
//                        that claimed rank r and the address it listens on, with its host
//                        id (host_id.hpp) after it (compare_set: the first claimant wins, a
//                        second one is a clash)
//   e<epoch>/joined      counter: ranks that claimed
//   e<epoch>/state       the formation's outcome, written once (compare_set):
//                        "formed <host map>" by the rank whose join completed the count,
//                        "clash <message>" (a duplicate rank, a different world size, ...),
//                        "superseded" by a new rank 0 that found this formation's rank 0 gone
//   e<epoch>/gone        "<rank> <message>": a member found that rank gone during setup
//   e<epoch>/left        counter: members that destroyed the group (the last removes the rest)
//   e<epoch>/missing     who never showed up, worked out once by the first rank to time out
//   clash                "<unix ms> <message>": the latest clash of any formation, for the
//                        ranks waiting elsewhere (see below); kept after the group is gone
// Every rank makes four store round trips to join (read or await `current`, claim, count,
// wait for `state`, which brings the claims of MembershipOptions::prefetch with it), whatever
// the world size; the rank that completes the count reads every claim once to build the host
// map (O(N) for the whole group), and a rank reads another's address only when it connects to
// it (fetch_addresses, one round trip for any number of ranks, none for those prefetched).
// A waiting rank looks at `current` again after each slice of its wait (1 s, growing
// with the world size so that a whole group's looks stay near a thousand a second).
// Rank 0 always starts a new epoch (so a relaunch never reuses a dead formation) and marks the
// one it replaces "superseded", which moves anyone waiting there to the new one. A formation
// whose rank 0 is dead never forms: the rank completing the count first checks that rank 0
// answers a connection (a claim already taken is checked the same way: a leftover of a dead
// launch is skipped, a live claimant is a clash). Every clash is written to the state, so
// every member fails at once with the same message, and to `clash`: a process that clashed
// in one formation may be the rank another formation waits for (two jobs on one run id: the
// second job's rank 1 meets the first job's formation, its rank 0 starts a new one). A rank
// waiting in setup that sees a clash recorded within the last minute waits only 5 s more
// for the ranks it misses, then fails naming that clash. A rank whose count overshoots the
// world size met a formation that completed without it (a member left and freed its claim):
// it withdraws and waits for the next formation. A formation that never completes keeps
// its records (the others' "never showed up" lists stay true while they time out; a relaunch
// starts a new epoch and ignores them).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "cpu/bootstrap/handshake.hpp"

namespace chorus::cpu {

struct MembershipOptions {
  int rank = 0;
  int size = 1;
  std::string where;    // "tcp group setup on rank 1/4 [world]" for messages
  std::string group;    // group name, for error contexts
  Duration timeout{0};  // the bound the deadline was set from, for messages
  Deadline deadline = Deadline::never();
  std::string local_address;  // our "host:port"
  std::string host_id;        // which machine we run on (host_id.hpp): picks same-host peers
  std::string token;          // the job token (group_key.hpp: group_token()); "": none
  // Ranks whose addresses to read together with the formation's outcome (the ring neighbours
  // the mesh links to first): in the same round trip, not one more per rank afterwards.
  std::vector<int> prefetch;
  // Called between the slices of every wait (rank 0 drains its listener there, so that a
  // large group's liveness probes never fill its backlog).
  std::function<void()> between_slices;
  // Also asked between the slices: a reason to give the formation up now ("": go on). The
  // rank that gives up records it as the formation's state, which wakes every rank waiting in
  // the formation at once; each throws Error{aborted} with the reason.
  std::function<std::string()> give_up;
};

struct Membership {
  std::string epoch;  // empty for a group of one (no store records)
  std::uint64_t group_id = 0;
  int size = 1;
  // "host:port" of the ranks read so far (fetch_addresses), this rank's own included: a rank
  // holds the addresses of the peers it links to, not the world's.
  std::unordered_map<int, std::string> addresses;
  // Which ranks share a host, run-length coded as recorded in the formation's state
  // ("0*4 1*4": ranks 0-3 on one host, 4-7 on another); host_ids() expands it.
  std::string host_map;
  // Proves membership in the mesh handshake; with a job token it is never in the store.
  GroupSecret secret{};
};

// One id per rank: ranks with equal ids share a host.
std::vector<std::string> host_ids(const Membership& membership);

// The context of a group-setup error (op "connect") naming `peers`.
ErrorContext setup_error_context(int rank, int size, const std::string& group, Duration timeout,
                                 std::vector<int> peers);

// Publishes this rank and waits until every rank of the formation has. Throws TimeoutError
// naming the ranks that never showed up, or InvalidArgument naming a clash (duplicate rank,
// different world size, two rank 0s: another job on the same store and run id).
Membership join_group(Store& store, const MembershipOptions& options);

// Reads the addresses of `ranks` not read yet. Every member published its address (its claim)
// before the formation completed, and deletes it when it leaves (leave_group), so an address
// missing now means that rank has left the group: such ranks are returned (their addresses stay
// unread) rather than waited for. Otherwise membership.addresses holds every one of them
// afterwards. Throws StoreError/TimeoutError if the store itself fails or is slower than
// `deadline`.
[[nodiscard]] std::vector<int> fetch_addresses(Store& store, Membership& membership,
                                               const std::vector<int>& ranks, Deadline deadline);

// Records that `rank` is gone (its published address refuses connections), so that every
// member names the root cause, not the members that left because of it. Best effort.
void record_gone(Store& store, const Membership& membership, int rank, const std::string& message);
// The rank and message of a recorded departure, if any.
std::optional<std::pair<int, std::string>> recorded_gone(Store& store,
                                                         const Membership& membership);

// Removes this rank's records; the last member to leave also removes the formation's shared
// records and `current` (if still this formation's). Best effort: never throws. Destroyed
// groups leave no keys behind.
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
inline constexpr const char* kClashKey = "clash";
// Rank 0's link-cost figures for the formation (link_costs.hpp).
inline constexpr const char* kLinkCostsRecord = "link_costs";

// "<pid>@<hostname>" of this process (no spaces: a record field), and "process <pid>@<host>"
// for messages that must tell processes apart.
std::string pid_at_host();
std::string process_identity();

}  // namespace chorus::cpu
