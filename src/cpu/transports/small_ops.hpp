// SPDX-License-Identifier: BSD-3-Clause
// SmallOps: a transport's capability (EngineTransport::small_ops()) to run small collectives
// without messages, as NCCL's LL protocol is a protocol of a transport: each rank publishes its
// input where every peer can read it, and every rank computes the result from all the inputs.
// The shared-memory transport offers it (its small-op board, transports/shm/slot_board.hpp)
// when every rank of the group is on one host; a transport without it returns nullptr.
//
// Division of work: the transport owns the shared state and how ranks wait on it; the engine
// keeps the op-level logic (issue order and sequence numbers, deadlines, failing the group,
// naming late or mismatched peers). The engine drives an op as:
//   publish(sig, in)           this rank's input and the op's signature; then wake_peers(),
//                              after a first look with ready() (the wake may wait for the
//                              publish to reach the peers, and the look overlaps that wait)
//   ready(sig, mismatch)       until every rank has published the op, or a peer is found at
//                              this seq with another op (mismatch: the engine fails the group)
//   snapshot() / wait()        between looks: sleep until something changes or the deadline
//   finish(out, ...)           once ready: the result into `out`; the op is over
// and every collective that does not run here is announce()d when it starts, so a peer
// waiting here for that seq sees the mismatch at once.
//
// Same answer on every rank: the engine routes an op here only if takes() says so, and every
// rank of the group must offer the capability or none (a stack that hides it on one rank must
// hide it on all: see fault_transport.hpp).
//
// Threads: one thread at a time per rank runs an op here (the issuing caller's or the engine's,
// handed over under the group's locks), which may change from op to op; announce() comes from
// the engine's loop, never while another thread runs an op here.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/types.hpp>

#include "core/signature.hpp"

namespace chorus::cpu {

class SmallOps {
 public:
  // How the engine names this path (flight recorder, logs): a static string.
  virtual const char* name() const noexcept = 0;
  // Whether op `sig` with `bytes` of input per rank runs here (the same answer on every rank).
  virtual bool takes(const OpSignature& sig, std::size_t bytes) const noexcept = 0;
  // The largest input takes() accepts (for the flight recorder's late records).
  virtual std::size_t max_bytes() const noexcept = 0;

  // Any collective not run here, when it starts on this rank.
  virtual void announce(const OpSignature& sig) noexcept = 0;
  // This rank's input of op `sig` (`bytes` <= max_bytes()).
  virtual void publish(const OpSignature& sig, const void* in, std::size_t bytes) noexcept = 0;
  // Wakes peers that sleep in wait() (for a publish of this rank's).
  virtual void wake_peers() noexcept = 0;

  struct Mismatch {
    int peer = -1;
    OpSignature theirs;
  };
  // Whether every rank has published op `sig` (published by this rank); a peer found running
  // another op at this seq (or already past it) sets `mismatch`.
  virtual bool ready(const OpSignature& sig, std::optional<Mismatch>& mismatch) const noexcept = 0;
  // Once ready(): the result of the op into `out` (`count` x `dtype`, reduced with `op`), the
  // same bits on every rank. Ends the op on this rank.
  virtual void finish(void* out, std::size_t count, DataType dtype, ReduceOp op) noexcept = 0;
  // The ranks that have not published op `seq` yet, each with the latest seq it announced or
  // published (for timeout messages).
  virtual std::vector<std::pair<int, std::uint64_t>> missing(std::uint64_t seq) const = 0;

  // A token of what has been published and announced so far: taken before a look with ready(),
  // so that a publish landing between that look and wait() ends the wait at once.
  virtual std::uint64_t snapshot() const noexcept = 0;
  // Blocks until the state differs from `seen` or `until` passes (bounded: it may also return
  // early). Whether the state changed: when not, the caller looks at its deadline (a clock read
  // the usual case is spared).
  virtual bool wait(std::uint64_t seen, Deadline until) noexcept = 0;

 protected:
  ~SmallOps() = default;  // owned by the transport that offers it, never deleted through this
};

}  // namespace chorus::cpu
