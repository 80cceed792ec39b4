// SPDX-License-Identifier: BSD-3-Clause
// Store authentication (docs/protocol.md §1.1): a shared job token, never sent. A server with a
// token answers the hello with status auth_required and a random challenge; the client proves
// it knows the token (HMAC over both nonces) and the server proves it back, so neither a
// stranger nor a fake server learns or uses anything. Pure functions; the I/O is in the client
// and the server.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/hmac.hpp"

namespace chorus::store {

inline constexpr std::size_t kNonceBytes = 32;
using Nonce = std::array<std::uint8_t, kNonceBytes>;
// Client -> server after a challenge: its own nonce, then its proof.
inline constexpr std::size_t kAuthAnswerBytes = kNonceBytes + net::kMacBytes;
// Server -> client: 1 byte (0 accepted, 1 refused), then the server's proof if accepted.
inline constexpr std::size_t kAuthVerdictBytes = 1 + net::kMacBytes;
inline constexpr std::size_t kMinTokenBytes = 16;
inline constexpr std::size_t kMaxTokenBytes = 4096;

net::Mac client_proof(std::string_view token, const Nonce& server_nonce, const Nonce& client_nonce);
net::Mac server_proof(std::string_view token, const Nonce& server_nonce, const Nonce& client_nonce);
Nonce random_nonce();

// Throws InvalidArgument unless `token` is a usable job token (16 to 4096 bytes, no whitespace
// at either end: a copy-paste accident), naming where it came from.
void check_token(const std::string& token, const char* source);
// CHORUS_STORE_TOKEN, checked; "" when unset.
std::string token_from_env();

}  // namespace chorus::store
