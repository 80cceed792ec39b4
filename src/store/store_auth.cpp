// SPDX-License-Identifier: BSD-3-Clause
#include "store/store_auth.hpp"

#include <cctype>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"

namespace chorus::store {
namespace {

// Domain separation: a client proof is never a valid server proof, nor a mesh proof.
constexpr std::string_view kClientLabel = "chorus-store/1 client proof";
constexpr std::string_view kServerLabel = "chorus-store/1 server proof";

net::Mac proof(std::string_view label, std::string_view token, const Nonce& server_nonce,
               const Nonce& client_nonce) {
  return net::hmac_sha256(net::as_bytes(token), {net::as_bytes(label), server_nonce, client_nonce});
}

}  // namespace

net::Mac client_proof(std::string_view token, const Nonce& server_nonce,
                      const Nonce& client_nonce) {
  return proof(kClientLabel, token, server_nonce, client_nonce);
}

net::Mac server_proof(std::string_view token, const Nonce& server_nonce,
                      const Nonce& client_nonce) {
  return proof(kServerLabel, token, server_nonce, client_nonce);
}

Nonce random_nonce() {
  Nonce n{};
  net::random_bytes(n);
  return n;
}

void check_token(const std::string& token, const char* source) {
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    throw InvalidArgument(fmt::format(
        "{} is {} bytes long; a store token must be {} to {} bytes of random text (e.g. "
        "`openssl rand -hex 32`; chorusrun makes one per launch)",
        source, token.size(), kMinTokenBytes, kMaxTokenBytes));
  }
  if (std::isspace(static_cast<unsigned char>(token.front())) ||
      std::isspace(static_cast<unsigned char>(token.back()))) {
    throw InvalidArgument(fmt::format(
        "{} starts or ends with whitespace (a newline from a file?); strip it so that every "
        "process uses the same token",
        source));
  }
}

std::string token_from_env() {
  auto token = env::get("CHORUS_STORE_TOKEN");
  if (!token) {
    return {};
  }
  check_token(*token, "CHORUS_STORE_TOKEN");
  return *token;
}

}  // namespace chorus::store
