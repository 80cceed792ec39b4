// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_FAULT: rehearse failures on a real cluster. When the variable is set, every rank's
// transport is wrapped in a FaultTransport (fault_layer.cpp, an entry of the transport table in
// transport_stack.hpp) that injects the faults the variable names for that rank, if any; when it
// is unset, nothing is wrapped (no cost).
//
// Syntax: FAULT[;FAULT...], each FAULT one of
//   rank=R:close_link=P[,after_bytes=N]  rank R closes its connections to rank P, as a crash
//                                        would, once it has sent N bytes to P (default 0; N
//                                        may end in K, M or G, binary); R fails at once
//   rank=R:stall=T[,at_seq=S]            rank R's engine stops all progress for T (500ms, 3s)
//                                        just before it starts collective seq S (default 1)
//   rank=R:exit_at_seq=S                 rank R's process exits (status 3) in the middle of op
//                                        seq S, after posting its first transfers
// R and P are ranks within each tcp group the process creates.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>

#include "cpu/transports/forwarding_transport.hpp"

namespace chorus::cpu {

struct Fault {
  enum class Kind : std::uint8_t { close_link, stall, exit };
  Kind kind = Kind::close_link;
  int rank = 0;
  int peer = -1;                  // close_link
  std::uint64_t after_bytes = 0;  // close_link
  Duration stall{0};              // stall
  std::uint64_t at_seq = 1;       // stall, exit
};

inline constexpr int kFaultExitStatus = 3;

// Parses a CHORUS_FAULT value; throws InvalidArgument naming the variable and the accepted
// forms when it is malformed.
std::vector<Fault> parse_faults(const std::string& text);

// The warning for the faults of `spec` that name a rank (or a close_link peer) outside a group
// of `size` ranks, which would otherwise do nothing silently; "" when every one fits.
std::string faults_outside_group(const std::string& spec, const std::vector<Fault>& faults,
                                 int size);

// The faults CHORUS_FAULT names for `rank` of a group of `size` (none when it is unset). Rank
// 0 of the group logs faults_outside_group() as a WARN.
std::vector<Fault> faults_for(int rank, int size);

// Forwards everything to `inner` and injects the faults of this rank.
class FaultTransport final : public ForwardingTransport {
 public:
  FaultTransport(int rank, std::unique_ptr<EngineTransport> inner, std::vector<Fault> faults);

  void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override;
  void send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                std::uint64_t token) override;
  void send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) override;
  void poll(Deadline until, std::vector<std::uint64_t>& completed,
            std::vector<TransportEvent>& events) override;
  void op_starting(const OpSignature& sig) noexcept override;
  // Hidden: faults fire on the engine's paths (op_starting, the sends), which a small op that
  // the issuing caller runs itself through the capability bypasses. Every rank of a group has
  // a FaultTransport while CHORUS_FAULT is set, so all of them take the engine's path.
  SmallOps* small_ops() noexcept override { return nullptr; }

 private:
  void count_sent(int peer, std::size_t bytes);

  int rank_;
  std::vector<Fault> faults_;
  std::vector<bool> fired_;
  std::vector<std::uint64_t> sent_;  // bytes sent per peer
  std::vector<TransportEvent> pending_;
  bool exit_ = false;  // exit_at_seq reached: exit at the next poll, once the op is posted
};

}  // namespace chorus::cpu
