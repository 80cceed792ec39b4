// SPDX-License-Identifier: BSD-3-Clause
// The cryptography of chorus's handshakes, over OpenSSL's libcrypto: HMAC-SHA256 proofs,
// constant-time comparison and random nonces. Used by the store's authentication (a job
// token) and by the tcp mesh handshake (a per-group secret from the store).
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace chorus::net {

inline constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256
using Mac = std::array<std::uint8_t, kMacBytes>;

// HMAC-SHA256 of the concatenation of `parts`, keyed by `key`.
Mac hmac_sha256(std::span<const std::uint8_t> key,
                std::initializer_list<std::span<const std::uint8_t>> parts);
// Constant time in the contents (CRYPTO_memcmp): a timing side channel reveals nothing.
bool equal_macs(const Mac& a, const Mac& b) noexcept;
// Bytes from the kernel's random source (getrandom); throws chorus::Error(internal) if it fails.
void random_bytes(std::span<std::uint8_t> out);

std::span<const std::uint8_t> as_bytes(std::string_view text) noexcept;
// Lower-case hex of bytes, and back (nullopt-like: false if `hex` is not 2 × out.size() hex
// digits).
std::string to_hex(std::span<const std::uint8_t> bytes);
bool from_hex(std::string_view hex, std::span<std::uint8_t> out) noexcept;

}  // namespace chorus::net
