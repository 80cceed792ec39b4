// SPDX-License-Identifier: BSD-3-Clause
// StatusProbe: what a rank does when an op times out, before it fails the group. It asks the
// peers the op may wait for for their status (a status_request on the control channel) and
// gives them a bounded grace to answer; the peers that stay silent, or that have not issued the
// op yet, are the ones the timeout error names.
//
// Separate from the engine because it is a small protocol of its own (ask, collect, judge)
// whose only tie to the loop is the deadline it adds and the replies the loop hands it.
#pragma once

#include "core/private.hpp"

#include <optional>
#include <vector>

#include "cpu/engine/failure_report.hpp"
#include "cpu/engine/op.hpp"
#include "cpu/transports/transport.hpp"
#include "cpu/transports/wire.hpp"

namespace chorus::cpu {

class StatusProbe {
 public:
  // Sends the status requests for `op` (a collective, or a recv from any rank, may wait for
  // any peer; else only its peer) to every linked peer it may wait for.
  StatusProbe(Op* op, int rank, int size, EngineTransport& transport);

  // How long a timed-out rank waits for its peers' status replies before naming the silent
  // ones. Long enough for a loaded machine to answer, short next to the op's timeout.
  static Duration grace(Duration timeout);

  Op* op() const noexcept { return op_; }
  Deadline until() const noexcept { return until_; }
  // A status_reply from `peer` (nullopt: unreadable, which counts as no answer).
  void answer(int peer, std::optional<StatusReply> reply);
  // Every peer asked has answered, or the grace has passed.
  bool settled() const;
  // The peers asked that did not answer, or (for a collective) answered with an issued seq
  // behind the op's, in rank order.
  std::vector<ProbeFinding> findings() const;

 private:
  Op* op_;  // the op that timed out
  Deadline until_;
  std::vector<std::optional<StatusReply>> replies_;
  std::vector<bool> asked_;
};

}  // namespace chorus::cpu
