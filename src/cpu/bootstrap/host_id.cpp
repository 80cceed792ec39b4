// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/bootstrap/host_id.hpp"

#include <unistd.h>

#include <fstream>

#include "core/env.hpp"

namespace chorus::cpu {

std::string local_host_id() {
  if (auto id = env::host_id()) {
    return *id;
  }
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) {
    host[0] = '\0';
  }
  std::string id = (boot_id.empty() ? "noboot" : boot_id) + "@" + host;
  for (char& c : id) {
    if (c <= ' ' || c >= 127) {
      c = '_';
    }
  }
  return id;
}

}  // namespace chorus::cpu
