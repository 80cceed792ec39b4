// SPDX-License-Identifier: BSD-3-Clause
// Which machine a rank runs on, as published with its address: ranks with equal host ids talk
// over shared memory (shm_transport.hpp).
#pragma once

#include "core/private.hpp"

#include <string>

namespace chorus::cpu {

// CHORUS_HOST_ID if set (tests split one machine into "hosts" with it), else the kernel's boot
// id and the hostname: two containers on one kernel with different hostnames count as two
// hosts (their /dev/shm usually differs too). Never contains a space.
std::string local_host_id();

}  // namespace chorus::cpu
