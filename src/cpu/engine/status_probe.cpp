// SPDX-License-Identifier: BSD-3-Clause
// StatusProbe: ask the peers of a timed-out op where they are (see status_probe.hpp).
#include "cpu/engine/status_probe.hpp"

#include <algorithm>

namespace chorus::cpu {

StatusProbe::StatusProbe(Op* op, int rank, int size, EngineTransport& transport)
    : op_(op), until_(Deadline::after(grace(op->call.timeout))) {
  replies_.resize(static_cast<std::size_t>(size));
  asked_.resize(static_cast<std::size_t>(size), false);
  for (int p = 0; p < size; ++p) {
    const bool relevant = op->kind == Op::Kind::collective || op->peer == kAnyPeer || p == op->peer;
    if (p != rank && relevant && transport.peer_connected(p)) {
      transport.send_control(p, FrameType::status_request, encode_u64(op->call.seq));
      asked_[static_cast<std::size_t>(p)] = true;
    }
  }
}

Duration StatusProbe::grace(Duration timeout) {
  return std::clamp<Duration>(timeout / 10, std::chrono::milliseconds(100),
                              std::chrono::seconds(2));
}

void StatusProbe::answer(int peer, std::optional<StatusReply> reply) {
  replies_[static_cast<std::size_t>(peer)] = reply;
}

bool StatusProbe::settled() const {
  for (std::size_t p = 0; p < asked_.size(); ++p) {
    if (asked_[p] && !replies_[p]) {
      return until_.expired();
    }
  }
  return true;
}

std::vector<ProbeFinding> StatusProbe::findings() const {
  std::vector<ProbeFinding> found;
  for (std::size_t p = 0; p < asked_.size(); ++p) {
    if (!asked_[p]) {
      continue;
    }
    if (!replies_[p]) {
      found.push_back({static_cast<int>(p), false, 0});
    } else if (op_->kind == Op::Kind::collective && replies_[p]->issued_seq < op_->call.seq) {
      found.push_back({static_cast<int>(p), true, replies_[p]->issued_seq});
    }
  }
  return found;
}

}  // namespace chorus::cpu
