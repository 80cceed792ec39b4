// SPDX-License-Identifier: BSD-3-Clause
// Op: one queued call of a CpuProcessGroup: what to run (a collective's arguments and
// signature, or a tagged send/recv), its sequence number and deadline, and the Work to
// complete. Built on the user's thread, owned by the engine afterwards. A tagged send/recv
// keeps its element count and dtype in `args` (for messages only).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/process_group.hpp>

#include "core/op_call.hpp"

#include "core/signature.hpp"
#include "core/work_state.hpp"
#include "cpu/algorithms/algorithms.hpp"

namespace chorus::cpu {

struct Op {
  enum class Kind : std::uint8_t { collective, send, recv };
  Kind kind = Kind::collective;
  CollectiveArgs args;  // collective
  // The variable-size collectives' counts per rank, which args.in_counts/out_counts point into.
  std::vector<std::size_t> in_counts;
  std::vector<std::size_t> out_counts;
  // A coalesced op's tensor pairs, which args.parts points into.
  std::vector<CoalescedPart> parts;
  OpSignature sig;  // collective
  // Runs through the transport's SmallOps capability (Engine::runs_small()), not a schedule.
  bool via_small_ops = false;
  bool small_published = false;  // published there by the caller's thread (run_small_op())
  int peer = -1;                 // send/recv (a recv's may be kAnyPeer)
  std::uint32_t tag = 0;
  void* data = nullptr;
  std::size_t bytes = 0;  // payload bytes of this rank (for messages)
  OpCall call;
  std::shared_ptr<WorkState> work;

  // "allreduce (seq 5, 1048576 x float32, sum, 4 MiB)", for messages. Formatted only when a
  // message needs it: formatting costs about as much as the rest of a small op's call.
  std::string what() const;
};

}  // namespace chorus::cpu
