// SPDX-License-Identifier: BSD-3-Clause
// The one place chorus reads environment variables: typed, validated, documented.
#pragma once

#include "core/private.hpp"

#include <optional>
#include <string>
#include <string_view>

#include <chorus/deadline.hpp>
#include <chorus/logging.hpp>
#include <chorus/types.hpp>

namespace chorus::env {

// Raw value of any variable (launcher variables such as RANK included); nullopt if unset or
// empty. Every getenv in chorus goes through here.
std::optional<std::string> get(const char* name);

// A base-10 integer that is the whole of `text` ("12", "-3"); nullopt for anything else: a
// leading or trailing space, '+', "0x10", "12abc", "" or a value beyond long long. Every
// integer variable goes through here (get_int).
std::optional<long long> parse_integer(std::string_view text);

// Parses an integer variable strictly (parse_integer); throws InvalidArgument naming the
// variable, its value and `who_sets_it` (e.g. "torchrun") when it is not an integer in
// [min, max].
std::optional<long long> get_int(const char* name, long long min, long long max,
                                 const char* who_sets_it);

// CHORUS_TIMEOUT: default deadline of store calls, connects and collectives. Accepts
// "600" (seconds) or a number with suffix ms, s, m, h. Throws InvalidArgument on a bad value.
std::optional<Duration> default_timeout();
// The timeout to use when a caller gave none: CHORUS_TIMEOUT, else kDefaultTimeout.
Duration resolve_default_timeout();
// Parses a duration as CHORUS_TIMEOUT does: decimal digits with an optional fraction and an
// optional unit ("600", "1.5s", "500ms"); nullopt for anything else (spaces, signs, exponents,
// hex such as "0x10", inf, nan, trailing junk, more than 1e9 units).
std::optional<Duration> parse_duration(std::string_view text);

// CHORUS_PEER_TIMEOUT: a duration as for CHORUS_TIMEOUT, or 0 / "off" (liveness checks off,
// returned as zero). Throws InvalidArgument on a bad value.
std::optional<Duration> peer_timeout();
// The peer timeout of a group: `given` if set, else CHORUS_PEER_TIMEOUT, else
// kDefaultPeerTimeout.
Duration resolve_peer_timeout(std::optional<Duration> given);

// CHORUS_DEBUG=WARN|INFO|TRACE|NONE (default WARN). Throws InvalidArgument on a bad value.
LogLevel debug_level();
// CHORUS_SOCKET_IFNAME: interface name or local address for data sockets.
std::optional<std::string> socket_ifname();

// CHORUS_HOST_ID: which machine this process counts as running on (ranks with the same id
// talk over shared memory). At most 128 printable characters, no spaces. Throws
// InvalidArgument on a bad value.
std::optional<std::string> host_id();

// CHORUS_TRANSPORT=auto|tcp|shm (default auto): how ranks on one host exchange collective
// data. auto: shared memory, falling back to tcp (with a warning) if it cannot be set up;
// shm: shared memory or an error; tcp: sockets only. Throws InvalidArgument on a bad value.
enum class TransportChoice { automatic, tcp, shm };
TransportChoice transport_choice();

// CHORUS_MAX_PEER_SOCKETS: at most this many sockets to peers per rank (tcp backend), met by
// closing the least recently used idle links; unset: no bound. Throws InvalidArgument on a
// bad value.
std::optional<long long> max_peer_sockets();

// CHORUS_WIRE_DTYPE=bf16|fp16|fp32|off (default off): the group default of the wire that
// float reductions travel between hosts in (core/wire.hpp; fp32 applies to float64 data).
// Throws InvalidArgument on a bad value.
std::optional<DataType> wire_dtype();

}  // namespace chorus::env
