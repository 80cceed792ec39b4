// SPDX-License-Identifier: BSD-3-Clause
// Issues a collective_cases.hpp Case on a real ProcessGroup (the multi-process tests).
#pragma once

#include <memory>

#include <chorus/process_group.hpp>

#include "tcp/collective_cases.hpp"

namespace chorus::test {

inline std::shared_ptr<Work> issue_case(ProcessGroup& pg, const Case& c, RankBuffers& b) {
  switch (c.kind) {
    case OpKind::allreduce:
      return pg.allreduce(b.in, b.out, {.op = c.op});
    case OpKind::allgather:
      return pg.allgather(b.in, b.out);
    case OpKind::reduce_scatter:
      return pg.reduce_scatter(b.in, b.out, {.op = c.op});
    case OpKind::broadcast:
      return pg.broadcast(b.in, {.root = c.root});
    case OpKind::reduce:
      return pg.reduce(b.in, b.out, {.op = c.op, .root = c.root});
    case OpKind::gather:
      return pg.gather(b.in, b.out, {.root = c.root});
    case OpKind::scatter:
      return pg.scatter(b.in, b.out, {.root = c.root});
    case OpKind::all_to_all:
      return pg.all_to_all(b.in, b.out);
    case OpKind::barrier:
      return pg.barrier();
    case OpKind::allgatherv:  // the variable-size collectives have cases of their own
    case OpKind::reduce_scatterv:
    case OpKind::all_to_allv:
      break;
  }
  return nullptr;
}

}  // namespace chorus::test
