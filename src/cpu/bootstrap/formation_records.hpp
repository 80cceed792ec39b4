// SPDX-License-Identifier: BSD-3-Clause
// The records of a group formation in the store (the key layout is in membership.hpp): their
// keys, how each is written and parsed (the leader record and `current`, the claim
// records, the host map of the `state` record), the one-round-trip read the membership protocol
// uses everywhere (peek), and the liveness check of a recorded rank 0.
//
// Separate from membership.cpp, which runs the protocol (lead, follow, wait, leave): these are
// its data formats, each written by one function and read by its twin.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/store.hpp>

#include "cpu/bootstrap/handshake.hpp"
#include "cpu/bootstrap/membership.hpp"

namespace chorus::cpu::formation {

// A leader that does not accept a connection within this is treated as gone for now.
inline constexpr Duration kProbeTimeout = std::chrono::seconds(2);

std::string random_epoch();
std::uint64_t random_group_id();

std::string claim_key(const std::string& e, int r);

// The value of `key`, or "" if it does not exist: one round trip, no wait.
std::string peek(Store& store, const std::string& key);

struct Leader {
  int size = 0;
  std::uint64_t group_id = 0;
  std::string who;
  std::string address;
  // The formation's random bytes: the group secret itself when rank 0 had no job token, else
  // the seed every rank derives the secret from with its token (group_key.hpp).
  GroupSecret seed{};
  std::optional<GroupSecret> token_check;  // set iff rank 0 had a job token
};

std::optional<Leader> parse_leader(const std::string& text);
std::string leader_record(const Leader& l);

// `current`: "<epoch> <leader record>", so that one read finds the formation and its leader.
struct Current {
  std::string raw;  // as stored ("" if absent), for compare_set
  std::string epoch;
  std::optional<Leader> leader;
};
Current parse_current(std::string raw);
Current read_current(Store& store);
// As read_current, but when there is none yet, waits up to `timeout` for rank 0 to record it
// (still one round trip); empty if none came.
Current await_current(Store& store, Duration timeout);

// True if a process accepts connections at the leader's address: a leader record left by a
// process that died is refused (or unreachable), one of a live rank 0 is accepted.
bool leader_alive(const Leader& leader, int my_rank, Deadline deadline);

// Milliseconds since the Unix epoch (the clash record's time stamp).
std::int64_t wall_clock_ms();

// The claim record, "<world size> <pid>@<host> <host:port>[ <host id>]": who claimed the rank,
// and where it listens for its group's links (no field holds a space).
std::string claim_record(const MembershipOptions& o);
struct Claim {
  int size = 0;
  std::string who;      // "<pid>@<host>"
  std::string address;  // "host:port"
  std::string host_id;  // "" if the rank had none
};
// nullopt if the record is not a claim.
std::optional<Claim> parse_claim(const std::string& record);

// The host map of the `state` record: each rank's host as an index in order of first
// appearance, run-length coded ("0*4 1*4" for two hosts of four consecutive ranks), from the
// ranks' claim records. A rank without a host id is a host of its own.
std::string encode_host_map(const std::vector<Bytes>& claims);

// Calls run(host, count) for each run of the host map; false if the map is malformed or does
// not cover exactly `size` ranks.
template <class Run>
bool for_each_host_run(const std::string& text, int size, Run run) {
  long covered = 0;
  const char* p = text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const long host = std::strtol(p, &end, 10);
    if (end == p || *end != '*') {
      return false;
    }
    p = end + 1;
    const long count = std::strtol(p, &end, 10);
    if (end == p || host < 0 || count < 1 || count > size - covered) {
      return false;
    }
    run(host, count);
    covered += count;
    p = *end == ' ' ? end + 1 : end;
    if (*end != ' ' && *end != '\0') {
      return false;
    }
  }
  return covered == size;
}

}  // namespace chorus::cpu::formation
