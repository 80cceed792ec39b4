// SPDX-License-Identifier: BSD-3-Clause
// The key of a formation's membership proofs (handshake.hpp), and where it comes from.
//
// Rank 0 draws 32 random bytes per formation and records them in `current` (membership.hpp).
// Without a job token those bytes ARE the group secret: whoever can read the store can join.
// With one, they are only a seed, and every rank derives the secret:
//   secret = HMAC-SHA256(token, "chorus-group-secret/1" || seed || group id, 8 bytes LE)
// so the store never holds anything that lets its readers join (torch's TCPStore, which
// chorus groups under torch bootstrap through, has no authentication at all). Rank 0 also
// records a token check, HMAC-SHA256(token, "chorus-token-check/1" || seed || group id):
// a rank started with another token (or none) finds out when it reads `current` and fails
// the formation with a message naming CHORUS_STORE_TOKEN, instead of failing handshakes.
// The check gives a reader nothing the handshake would not: both confirm a guessed token, and
// neither helps without one; tokens are random (chorusrun makes 32 bytes per launch).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/store.hpp>

#include "cpu/bootstrap/handshake.hpp"

namespace chorus::cpu {

// The job token a group on `store` derives its secret from: the token of the chorus TcpStore
// behind it if it has one (every client of that server proved the same token), else
// CHORUS_STORE_TOKEN (checked: InvalidArgument if malformed), else "" (no token).
std::string group_token(const Store& store);

GroupSecret derive_group_secret(std::string_view token, const GroupSecret& seed,
                                std::uint64_t group_id);
GroupSecret token_check(std::string_view token, const GroupSecret& seed, std::uint64_t group_id);

// Why a rank with `my_token` cannot join a formation whose leader recorded `leader_check`
// (nullptr: rank 0 had no token), or "" if it can. `leader` and `me` name the two processes
// ("rank 0 (process 12@node1)").
std::string token_mismatch(std::string_view my_token, const GroupSecret* leader_check,
                           const GroupSecret& seed, std::uint64_t group_id,
                           const std::string& leader, const std::string& me);

// Logs, once per process, that a group formed without a job token keeps its secret in the
// store (called by rank 0 of each group: one line per job, not per rank or group).
void note_tokenless_group(const std::string& where);

}  // namespace chorus::cpu
