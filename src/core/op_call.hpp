// SPDX-License-Identifier: BSD-3-Clause
// OpCall: identifies one call of a group (sequence number, name, deadline, flight recorder
// entry). Built by the Backend base after the argument checks and passed to the backend with
// the op's descriptor.
#pragma once

#include "core/private.hpp"

#include <cstdint>

#include <chorus/deadline.hpp>

namespace chorus {

struct OpCall {
  std::uint64_t seq = 0;  // 1-based, per group, in issue order
  const char* name = "";  // "allreduce" ...
  Duration timeout{0};    // as resolved from the call's or the group's options
  Deadline deadline = Deadline::never();
  Clock::time_point issued{};      // when the call took its seq: deadline - timeout, unsaturated
  std::uint64_t trace_record = 0;  // the op's flight recorder entry (0: recording is off)
};

}  // namespace chorus
