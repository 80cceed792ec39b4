// SPDX-License-Identifier: BSD-3-Clause
// How many SharedBuffer mappings this process has (/proc/self/maps): its own buffers and the
// peers' that its groups mapped. A test that frees its own buffers and still finds some knows
// the mapped single-copy path ran.
#pragma once

#include <fstream>
#include <string>

namespace chorus::test {

inline int mapped_shared_buffers() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    n += line.find("/memfd:chorus-shared-buffer") != std::string::npos ? 1 : 0;
  }
  return n;
}

}  // namespace chorus::test
