// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/plan/cost_model.hpp"

namespace chorus::cpu {

LinkCosts default_link_costs() noexcept {
  LinkCosts c;
  c.shm = {3.3, 22.7};
  c.socket = {9.6, 7.5};
  c.network = {25.0, 1.25};  // 10 Gbit/s
  c.peer_copy_gbps = 13.0;
  c.memcpy_gbps = 45.0;
  c.reduce_gbps = 38.0;
  c.host_cpus = 2;
  return c;
}

}  // namespace chorus::cpu
