// SPDX-License-Identifier: BSD-3-Clause
// The transport seam: everything the engine needs from the wire, as two interfaces.
//
// Transport (what the collective algorithms need): every ordered pair of ranks has a message
// stream (the collective channel). Messages from one rank to a peer leave in posting order and
// the i-th send to a peer is the i-th receive that peer posts for this rank, with the same
// length; algorithms are written so that both sides post in the same order (see
// schedule.hpp). Completion is reported by token to whoever drives the transport.
//
// EngineTransport (what the engine needs on top): tagged point-to-point messages and control
// frames (abort notices, goodbyes, status probes) on a per-peer control channel, one poll()
// that sleeps until something happens, failure events that name the peer (or this rank), and
// teardown. Control frames overtake queued tagged payloads (a frame already partly written is
// finished first); what a peer wrote before its link broke is delivered before the peer_failed
// event.
//
// Beyond that contract a transport may offer optional features, capabilities: an accessor
// returns the feature's interface, or nullptr where the transport does not offer it (small_ops()
// below, one_sided(); ForwardingTransport forwards them, so a decorator offers what the layer below
// does unless it overrides the accessor). The engine and the algorithms use a capability without
// knowing which transport offers it, and take another path where it is null. Hooks (op_starting,
// before_poll) tell a transport what the engine does; every transport may ignore them.
//
// Implementations: socket/ (sockets, production), shm/ (the collective streams of one host's
// ranks through shared memory, over the socket transport), cma/ (the one-sided capability through
// process_vm_readv and mapped SharedBuffers), fault/ (a decorator injecting
// CHORUS_FAULT faults), tests/tcp/memory_fabric.hpp (in memory, with injectable faults) and
// tests/tcp/loopback_transport.hpp (collective streams only). transport_stack.hpp builds a
// rank's stack from a table of them; docs/adding-a-transport.md says how to add one. The engine
// and the algorithms include only the seam (this file, small_ops.hpp, wire.hpp), never a
// transport's folder (scripts/check_layering.sh).
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>
#include <chorus/types.hpp>

#include "core/reduce.hpp"
#include "core/signature.hpp"
#include "cpu/plan/one_sided.hpp"
#include "cpu/transports/wire.hpp"

namespace chorus::cpu {

// A receive of `count` elements that is reduced as it arrives, element by element:
// out = local op received (received op local when !local_first), divided by `divisor` when it
// is not 0 (core/reduce.hpp). `out` may be exactly `local`. The message is never staged whole,
// which saves a copy where the transport can read it in place (shared-memory rings).
struct ReduceOnArrival {
  void* out = nullptr;
  const void* local = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int divisor = 0;
  bool local_first = true;
};

// Reduces `count` elements that arrived (`received`) with `local` into `out`, in the operand
// order `r` names. The one place both the fused and the staged path compute it.
inline void reduce_arrived(const ReduceOnArrival& r, void* out, const void* local,
                           const void* received, std::size_t count) {
  reduce(out, r.local_first ? local : received, r.local_first ? received : local, count, r.dtype,
         r.op, r.divisor);
}

class Transport {
 public:
  virtual ~Transport() = default;

  // Capability: reads and writes of peers' registered memory (plan/one_sided.hpp; nullptr: not
  // offered; offered only where every rank of the group offers it, so a choice made by it is
  // agreed).
  virtual OneSided* one_sided() noexcept { return nullptr; }

  // Queues `bytes` from `data` for `peer`. `data` is borrowed until `token` completes.
  virtual void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) = 0;
  // Queues a receive of exactly `bytes` from `peer` into `data` (borrowed until completion).
  virtual void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) = 0;
  // Queues a receive of count * element_size(dtype) bytes from `peer`, reduced as it arrives
  // (buffers borrowed until completion), in the stream's order like post_recv. Returns false,
  // queueing nothing, where this transport cannot do that for `peer`: the caller then receives
  // into scratch with post_recv and reduces once the message is complete.
  virtual bool post_recv_reduce(int peer, const ReduceOnArrival& r, std::uint64_t token) {
    (void)peer;
    (void)r;
    (void)token;
    return false;
  }
};

struct TransportEvent {
  enum class Kind : std::uint8_t {
    p2p_done,     // a tagged send/recv finished (error set if it failed on its own)
    control,      // a control frame arrived (abort, goodbye, status)
    peer_failed,  // a connection to `peer` broke: reset, or closed without a goodbye
    // This rank's transport failed on its own, not because of a peer (a device error, or a
    // rehearsed failure): the group fails with `code`, this rank as the root, `error` as the
    // message. `peer` names the peer involved, if any (-1: none).
    local_failure,
  };
  Kind kind = Kind::control;
  int peer = -1;
  std::uint64_t token = 0;
  FrameType frame = FrameType::abort;
  std::vector<std::uint8_t> payload;
  std::string error;  // p2p_done: why it failed; peer_failed, local_failure: what happened
  ErrorCode code = ErrorCode::network;  // local_failure: the error the group fails with
  int os_error = 0;
  bool left = false;  // peer_failed: the peer had said goodbye (left the group)
};

// recv_p2p's peer for a message from any peer (the public kAnySource).
inline constexpr int kAnyPeer = -1;

// What the engine expects of its next poll(), told before each one (before_poll). Hints: a
// transport that cannot use one ignores it.
struct PollHint {
  // Data is expected soon (a small collective in flight or just finished): look again and
  // again, yielding the core between looks, for up to `spin` before sleeping. Waking a sleeping
  // thread costs tens of microseconds on a VM; a small op's reply usually comes sooner. Zero:
  // sleep at once.
  std::chrono::microseconds spin{0};
  // The current op runs through small_ops(): it waits for no transfer, yet a poll should end
  // soon after a peer publishes there (the capability's publishes may wake what poll sleeps on).
  bool small_op = false;
};

class SmallOps;  // small_ops.hpp

// Every method except wakeup() runs on the engine's thread.
class EngineTransport : public Transport {
 public:
  // Tagged point-to-point on the control channel. The recv matches the first frame from
  // `peer` with `tag` (`peer` kAnyPeer: from any peer, the first to arrive); a frame that
  // arrives before its recv is buffered. Completion (or a failure of this message alone, e.g. a
  // size mismatch) comes back as a p2p_done event naming the peer the message came from.
  virtual void send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                        std::uint64_t token) = 0;
  virtual void recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                        std::uint64_t token) = 0;
  // Queues a control frame ahead of any queued tagged payload (best effort: dropped if the
  // peer is gone).
  virtual void send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) = 0;

  // Waits until something happens or `until` passes (not at all if results are pending) and
  // hands over what happened: appends completed collective tokens, and other events.
  virtual void poll(Deadline until, std::vector<std::uint64_t>& completed,
                    std::vector<TransportEvent>& events) = 0;
  // Any thread: makes a blocked poll() return soon.
  virtual void wakeup() noexcept = 0;

  // Forgets every posted transfer (the group failed): no user buffer is touched afterwards.
  virtual void drop_all() noexcept = 0;
  // Writes queued control frames until none is left or `until` passes (for goodbyes/aborts).
  virtual void flush_control(Deadline until) = 0;
  virtual void close_all() noexcept = 0;

  // Closes every connection to `peer` at once, as a crash would: no goodbye, no event here,
  // later transfers to `peer` are dropped; the peer sees a dead link. The engine never calls
  // it; a decorator may (FaultTransport's close_link), and so may a transport that must cut off
  // a peer it can no longer trust.
  virtual void sever(int peer) noexcept = 0;
  // The engine's loop is about to start collective `sig` (nothing of it is posted yet), on
  // either path. (A small op that the issuing caller runs itself through small_ops() is not
  // told: that runs beside the engine's thread. A transport that needs to see every op hides
  // small_ops().) For a transport that prepares per op, counts, traces or injects faults; most
  // ignore it.
  virtual void op_starting(const OpSignature& sig) noexcept { (void)sig; }
  // Told before every poll(): what the engine expects of it (PollHint).
  virtual void before_poll(const PollHint& hint) noexcept { (void)hint; }

  // Capabilities (see the top of this file): nullptr where not offered.
  // Small collectives without messages (small_ops.hpp). The engine asks once, when it is made,
  // and may use it from a caller's thread while its own thread polls.
  virtual SmallOps* small_ops() noexcept { return nullptr; }

  virtual bool peer_connected(int peer) const = 0;
  // Peer liveness: when something (data or a frame) last arrived from `peer`; nullopt when
  // the peer is not watched (it left the group, or its failure was already reported).
  virtual std::optional<Clock::time_point> last_heard(int peer) const = 0;
  // "host:port" of a peer, and of this rank: for error messages.
  virtual const std::string& address(int peer) const = 0;
  virtual const std::string& local_address() const = 0;
};

}  // namespace chorus::cpu
