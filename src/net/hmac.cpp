// SPDX-License-Identifier: BSD-3-Clause
#include "net/hmac.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chorus/errors.hpp>

namespace chorus::net {

Mac hmac_sha256(std::span<const std::uint8_t> key,
                std::initializer_list<std::span<const std::uint8_t>> parts) {
  // The one-shot HMAC() over the joined parts: the inputs are a few hundred bytes at most.
  std::size_t total = 0;
  for (const auto& p : parts) {
    total += p.size();
  }
  std::string joined;
  joined.reserve(total);
  for (const auto& p : parts) {
    joined.append(reinterpret_cast<const char*>(p.data()), p.size());
  }
  Mac out{};
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), out.data(), &len);
  if (ok == nullptr || len != kMacBytes) {
    throw Error(ErrorCode::internal, "HMAC-SHA256 failed in libcrypto");
  }
  return out;
}

bool equal_macs(const Mac& a, const Mac& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void random_bytes(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw Error(ErrorCode::internal,
                  fmt::format("getrandom failed: {}", n < 0 ? std::strerror(errno) : "no bytes"));
    }
    done += static_cast<std::size_t>(n);
  }
}

std::span<const std::uint8_t> as_bytes(std::string_view text) noexcept {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool from_hex(std::string_view hex, std::span<std::uint8_t> out) noexcept {
  if (hex.size() != out.size() * 2) {
    return false;
  }
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return false;
    }
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

}  // namespace chorus::net
