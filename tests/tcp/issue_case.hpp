// SPDX-License-Identifier: BSD-3-Clause
// Issues a collective_cases.hpp Case on a real ProcessGroup (the multi-process tests).
#pragma once

#include <memory>

#include <chorus/process_group.hpp>

#include "tcp/collective_cases.hpp"

namespace chorus::test {

// The case's kind is the descriptor's type: one entry for every op, no switch to keep in step.
inline std::shared_ptr<Work> issue_case(ProcessGroup& pg, const Case& c, RankBuffers& b) {
  return pg.run({.type = c.kind, .in = b.in, .out = b.out, .op = c.op, .root = c.root});
}

}  // namespace chorus::test
