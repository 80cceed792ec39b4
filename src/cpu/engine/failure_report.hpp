// SPDX-License-Identifier: BSD-3-Clause
// FailureReport: how the engine words a failure. It names ops ("allreduce #7 on rank 1/4 [g]")
// and ranks ("rank 2 (host:port)"), fills the ErrorContext, and builds the message of each kind
// of failure the engine raises (mismatch, lost or silent peer, timeout, a peer's news).
//
// Separate from the engine because the wording is long and the engine's job is deciding *when*
// to fail; the only state this needs is the peers' addresses, which links made on demand teach
// it late (asked of the transport again until known).
#pragma once

#include "core/private.hpp"

#include <exception>
#include <string>
#include <vector>

#include <chorus/errors.hpp>

#include "cpu/engine/op.hpp"
#include "cpu/transports/transport.hpp"
#include "cpu/transports/wire.hpp"

namespace chorus::cpu {

std::exception_ptr make_error(ErrorCode code, const std::string& message, ErrorContext ctx);

// What the abort notice (and a failed group's goodbye) tells peers about `error`: its code, op,
// implicated peers and message, with the root rank and what that rank said (empty: the same).
AbortNotice notice_of(const std::exception_ptr& error, int root_rank, std::string root_message);

// A peer that the status probe of a timed-out op found stuck (see StatusProbe::findings()).
struct ProbeFinding {
  int peer = -1;
  bool answered = false;         // false: it did not answer within the probe's grace
  std::uint64_t issued_seq = 0;  // answered: its last issued collective, behind the op's seq
};

class FailureReport {
 public:
  // `transport` must outlive this; only its address() is used (engine thread).
  FailureReport(int rank, int size, std::string group, const EngineTransport& transport);

  // "rank R (host:port)", or "rank R" while its address is unknown.
  std::string rank_name(int rank) const;
  // "<op> on rank R/N [group]" (op null: "tcp group ...").
  std::string prefix(const Op* op) const;
  ErrorContext context(const Op* op, std::vector<int> peers) const;
  bool valid_rank(int r) const { return r >= 0 && r < size_; }

  // "<prefix>: <what>", code `code`, naming `peers`.
  std::exception_ptr error(ErrorCode code, const Op* op, const std::string& what,
                           std::vector<int> peers) const;
  // The op's signature differs from `peer`'s: `what` says how. Either side may be the odd
  // one: the message names both.
  std::exception_ptr mismatch(const Op& op, int peer, const std::string& what) const;
  // `peer` said goodbye while this rank still needed it (for a small op, `detail` is its last
  // collective; for a transport event, what the transport saw).
  std::exception_ptr peer_left(const Op* op, int peer, const std::string& detail) const;
  // A connection to a peer broke (TransportEvent::Kind::peer_failed).
  std::exception_ptr peer_failed(const Op* op, const TransportEvent& ev) const;
  // `peer` was not heard from for `silent`, past the peer timeout.
  std::exception_ptr silent_peer(const Op* op, int peer, Duration silent,
                                 Duration peer_timeout) const;
  // `op` timed out. `waiting`: what it waited for (" waiting for data from "), followed by the
  // names of `direct`, the ranks it waited for; `findings`: what the probe learned. Sets
  // `culprits` (the findings' peers, else `direct`), the ranks the error names.
  std::exception_ptr timeout(const Op& op, std::string waiting, const std::vector<int>& direct,
                             const std::vector<ProbeFinding>& findings, Duration grace,
                             const EngineTransport& transport, std::vector<int>& culprits) const;
  // A peer's abort notice, or the cause in its goodbye (`left`). Sets the root rank and what it
  // said, for the engine to pass the news on.
  std::exception_ptr from_news(const Op* op, int from, const AbortNotice& notice, bool left,
                               int& root, std::string& root_message) const;

 private:
  const std::string& peer_address(int rank) const;

  int rank_;
  int size_;
  std::string group_;
  const EngineTransport& transport_;
  // Peers' "host:port" (engine thread; filled in as links are made).
  mutable std::vector<std::string> addresses_;
};

}  // namespace chorus::cpu
