// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by the store tests: temporary directories, timing, error checks.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <chorus/deadline.hpp>

namespace chorus::test {

// A fresh directory under $TMPDIR (or /tmp), removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/chorus-store-test-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline Duration since(Clock::time_point start) {
  return std::chrono::duration_cast<Duration>(Clock::now() - start);
}

// Generous slack for upper bounds on a loaded 2-core machine.
inline constexpr Duration kSlack = std::chrono::milliseconds(3000);

}  // namespace chorus::test
