// SPDX-License-Identifier: BSD-3-Clause
// Option aggregates for groups and for each call. Plain data with documented defaults, meant
// for designated initializers:  pg->allreduce(t, {.op = ReduceOp::avg, .timeout = 30s}).
// An unset optional timeout means "the group's default". There are no sentinel values.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include <chorus/deadline.hpp>
#include <chorus/types.hpp>

namespace chorus {

// The one default from which store, connect and collective deadlines derive, unless
// CHORUS_TIMEOUT (seconds, or a number with ms/s/m/h suffix) says otherwise.
inline constexpr Duration kDefaultTimeout = std::chrono::minutes(10);
// How long a tcp group waits without any traffic or heartbeat from a peer before it declares
// the peer dead, whatever the ops' deadlines, unless CHORUS_PEER_TIMEOUT says otherwise.
inline constexpr Duration kDefaultPeerTimeout = std::chrono::seconds(10);

struct AllreduceOptions {
  ReduceOp op = ReduceOp::sum;
  std::optional<Duration> timeout;  // unset: the group's timeout
  // The wire this op's data travels in between hosts (docs/architecture.md, "A narrower wire
  // between hosts"): bfloat16 or float16 for float32 data, float32 for float64 data; sum and
  // avg only. Partial sums are rounded to it as they leave for another host and added in the
  // data's own type, so no input is rounded and every rank ends with the same bits; links
  // inside a host, and ops small enough for the latency algorithms, keep full precision. The
  // op's own dtype: full precision. Unset: the group's default (TcpGroupOptions::wire_dtype,
  // CHORUS_WIRE_DTYPE), where it applies. The nccl backend has no narrower wire.
  std::optional<DataType> wire_dtype;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  std::optional<Duration> timeout;
  std::optional<DataType> wire_dtype;  // as AllreduceOptions::wire_dtype
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::optional<Duration> timeout;
  std::optional<DataType> wire_dtype;  // as AllreduceOptions::wire_dtype
};
// broadcast, gather, scatter.
struct RootOptions {
  int root = 0;
  std::optional<Duration> timeout;
};
// allgather, all_to_all, barrier, send, recv.
struct CollectiveOptions {
  std::optional<Duration> timeout;
};

// Options shared by every backend. Backend options contain one (composition, not inheritance,
// so designated initializers work: TcpGroupOptions{.group = {.name = "dp"}}).
struct GroupOptions {
  std::string name = "world";  // appears in every log line and error message
  // Default deadline of each op. Unset: CHORUS_TIMEOUT if set, else kDefaultTimeout.
  std::optional<Duration> timeout;
};

// ProcessGroup::shrink(): the survivors' group and how long they wait for each other.
struct ShrinkOptions {
  // The survivors' group. Name unset ("world"): "<this group's name>/shrink<k>"; timeout unset:
  // this group's.
  GroupOptions group;
  // How long the survivors wait for a rank they do not know to be dead before deciding without
  // it. A rank that arrives later (stopped, slow, cut off) is fenced out: its shrink() fails.
  Duration grace = std::chrono::seconds(2);
  // How long forming the survivors' group may take. A rank that arrived and died before the
  // group was formed is found by this bound, and the survivors agree again without it.
  Duration join_timeout = std::chrono::seconds(10);
};

// ProcessGroup::grow(): admitting the processes waiting to join (join_tcp_group()).
struct GrowOptions {
  // The larger group. Name unset ("world"): "<lobby>/grow<k>" (the lobby: the name of the group
  // make_tcp_group() made, which joiners name); timeout unset: this group's. Joiners take both.
  GroupOptions group;
  // How long to wait for a first joiner when none is waiting. Zero (the default): do not wait,
  // return nullptr at once; this is what a loop that calls grow() every step wants. A job that
  // expects a replacement (a restarted rank) can wait for it here. The other members wait for
  // rank 0 meanwhile, within the group's timeout: keep `wait` below it.
  Duration wait{};
  // How long forming the larger group may take. A joiner that died after it was admitted is
  // found by this bound: grow() then fails, and the members keep their group.
  Duration join_timeout = std::chrono::seconds(10);
};

// join_tcp_group(): how a new process waits to be let into a running group.
struct JoinOptions {
  // How long to wait for a member to call grow(). Unset: CHORUS_TIMEOUT, else kDefaultTimeout.
  std::optional<Duration> wait;
  // How long forming the larger group may take once admitted.
  Duration join_timeout = std::chrono::seconds(10);
};

struct TcpGroupOptions {
  GroupOptions group;
  // Interface to bind ("eth0") or a literal local address ("127.0.0.1", "::1").
  // Empty: CHORUS_SOCKET_IFNAME if set, else the address this host uses to reach the store.
  std::string interface;
  int sockets_per_peer = 1;  // parallel TCP connections per peer pair (1..8)
  // How long a connection to this rank's port may take to complete its handshake before it
  // is closed (a stranger: port scanner, health check). Connections are verified
  // concurrently, so this never delays the group.
  Duration hello_timeout = std::chrono::seconds(5);
  // The largest payload for which a latency algorithm (recursive doubling for allreduce, the
  // tree for broadcast and reduce) may be chosen; above it only the pipelined ones (ring,
  // halving-doubling, chain) are. Within this bound the group's cost model picks the cheapest
  // algorithm from link latencies and bandwidths measured at setup (docs/architecture.md);
  // 0 always takes the pipelined algorithms.
  std::size_t small_allreduce_bytes = 256 * 1024;
  // Bytes per pipeline slice in ring algorithms (send, receive and reduce overlap per slice).
  std::size_t slice_bytes = 256 * 1024;
  // Send buffer (SO_SNDBUF; the kernel doubles it) of the data sockets to ranks on this host,
  // when their collectives go over loopback tcp. Bounded, the bytes in flight between two
  // ranks stay in cache until the receiver copies them out; the kernel's autotuning lets them
  // grow to several MiB (64 MiB allreduce on loopback, 2 and 4 ranks: about 1.5x the busbw
  // with the bound; see docs/results.md). Links to other hosts keep the autotuning, which
  // sizes the buffer to the network path. 0: autotuning for these too.
  int local_send_buffer_bytes = 512 * 1024;
  // Peer liveness: each rank's progress thread sends a heartbeat to every peer a few times per
  // peer_timeout, and a peer not heard from (data or heartbeat) for peer_timeout is declared
  // dead: its host is down, the network is partitioned, or the process is stopped. This runs
  // while the group is idle too (a user thread computing for an hour is alive: the heartbeats
  // come from the progress thread, which runs no user code: Work callbacks run on a thread of
  // their own, so a callback that blocks for an hour is alive too). Unset: CHORUS_PEER_TIMEOUT,
  // else kDefaultPeerTimeout. Zero: no liveness checks (a peer that vanishes without a reset is
  // then noticed only at an op's deadline). Raise it to stop ranks in a debugger.
  std::optional<Duration> peer_timeout;
  // The default wire of the group's float reductions between hosts (AllreduceOptions::
  // wire_dtype): bfloat16 or float16 (float32 data travels in it, float64 data as float32),
  // or float32 (float64 data only). It applies to allreduce, reduce_scatter and reduce with sum
  // or avg on float data, and is ignored for every other op. Unset: CHORUS_WIRE_DTYPE
  // (bf16|fp16|fp32|off), else full precision.
  std::optional<DataType> wire_dtype;
};

struct NcclGroupOptions {
  GroupOptions group;
  int device = -1;  // CUDA device of this rank; -1: the current device
  // Caller's CUDA stream (a cudaStream_t) that ops are ordered after and that Work::wait()
  // makes wait. nullptr: the legacy default stream.
  void* stream = nullptr;
};

}  // namespace chorus
