// SPDX-License-Identifier: BSD-3-Clause
// --token-file for chorus-store and chorusrun: the job token is the file's first line (a
// trailing newline, as editors and `openssl rand -hex 32 > F` write it, is not part of it).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

namespace chorus::cli {

// nullopt if the file cannot be read; the token is checked by the store (16-4096 bytes).
inline std::optional<std::string> read_token_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    return std::nullopt;
  }
  char buf[4100];
  const std::size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  std::string token(buf, n);
  if (const auto eol = token.find_first_of("\r\n"); eol != std::string::npos) {
    token.resize(eol);
  }
  return token;
}

}  // namespace chorus::cli
