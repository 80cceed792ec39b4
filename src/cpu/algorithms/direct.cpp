// SPDX-License-Identifier: BSD-3-Clause
// Single-copy ("direct") collectives for a group whose transport offers one-sided access to
// the peers' memory (plan/one_sided.hpp; CollectiveArgs::one_sided: every rank on one host, in
// reach). A ring over shared memory copies every byte twice per hop (into the ring, out of it)
// and, for allreduce, makes n-1 hops of reduce-scatter and n-1 of allgather; here each rank
// reads what it needs straight from the other ranks' buffers, once.
//
// Every op has three parts:
//   1. each rank registers its buffers with the capability and sends the keys to its peers:
//      inside the op's signature headers where the memory kinds chose the algorithm
//      (build_memory_agreement), else (direct forced) as one small message on the collective
//      stream, after the signature header; the rest of the op is then built once the keys
//      arrived (Schedule::then()), since which peers' memory maps here depends on them;
//   2. the work: where a peer's buffer can be mapped (OneSided::map: it lies in a SharedBuffer),
//      copies and reductions straight from and into it, without a scratch piece or a system
//      call per piece; elsewhere read and write tasks, which the executor posts to the
//      capability and completes by token (inline for CMA, later for a transport that completes
//      later), their order only what the schedule's dependencies say;
//   3. each rank tells its peers it is done with their memory (one message), and the op ends
//      only when every peer whose memory may still be touched said so: until then a rank's
//      buffers stay valid (its op has not completed, so its caller cannot reuse them).
// Part 1 also decides, where the choice of algorithm depends on the memory kinds, which
// algorithm runs (build_memory_agreement below).
//
// allreduce: rank r owns chunk r (block_of(count, n, r)). Piece by piece (kPieceBytes, to stay
//   in cache), it reduces chunk r of every other rank's input (mapped, or read into a scratch
//   slot) into its own output, starting from its own input, in rank order of the others; then
//   it writes the finished piece into every other rank's output. Chunk r of every buffer is
//   touched by rank r alone, so in place is safe, and all ranks end with the same bits (one
//   rank computed each). Memory traffic per rank: the count read once and written once, the
//   least an allreduce can do (a ring at n = 4 reads and writes nearly twice that, besides
//   copying every message into and out of a shared ring). With every peer mapped, the pieces
//   run in one call task, which keeps a piece in cache from its reduction to its last copy.
// reduce_scatter: rank r reduces chunk r of every other input into its output.
// allgather: rank r reads every other rank's input into its block of the output.
// broadcast: every other rank reads the root's buffer.
// Each peer is reached its own way (mapped or not), so ranks that pass different kinds of
// memory still get the right result: only the speed differs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/logging.hpp"
#include "core/reduce.hpp"
#include "core/stream_copy.hpp"
#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {
namespace {

// Bytes reduced per step: a scratch piece and the output piece it is reduced into stay in the
// L2 cache until the piece has been written to every peer.
constexpr std::size_t kPieceBytes = 128 * 1024;

// An out-of-place allreduce with every peer mapped writes its outputs with non-temporal stores
// (reduce_and_stream) once the group's outputs together reach this size: they no longer fit the
// last-level cache, so a plain store would first read each output line from memory. Measured on
// the 2-core VM (32 MiB L3; docs/results.md, "SharedBuffers: the mapped single-copy path"): 8 MiB
// at 4 ranks 4.41 -> 5.13 GB/s, 64 MiB at 2 and 4 ranks +13 % and +16 %, but 8 MiB at 2 ranks 10.6
// -> 9.1. In place the outputs are the inputs just read, already in cache, and streaming lost (64
// MiB at 2 ranks 9.6 -> 7.1), so it never streams there.
constexpr std::size_t kStreamMinGroupBytes = std::size_t{32} << 20;

// The release message of part 3: a whole stream alignment unit, so that a continuation (which
// has no header to carry padding) needs no pad message after it.
constexpr std::size_t kReleaseBytes = kStreamAlign;

// The bytes of a rank's input and output that its peers may touch (the same on every rank:
// the signatures agree on the counts).
struct Extents {
  std::size_t in = 0;
  std::size_t out = 0;
};
Extents extents_of(const CollectiveArgs& a, int n) {
  const std::size_t bytes = a.count * element_size(a.dtype);
  const auto un = static_cast<std::size_t>(n);
  switch (a.kind) {
    case OpType::reduce_scatter:
      return {bytes * un, bytes};
    case OpType::allgather:
      return {bytes, bytes * un};
    default:
      return {bytes, bytes};
  }
}

// How this rank reaches one peer's buffers: mapped here, or else by read and write tasks on
// the keys.
struct PeerAccess {
  int peer = -1;
  const MemoryKey* in = nullptr;
  const MemoryKey* out = nullptr;
  const std::byte* in_map = nullptr;  // the peer's input mapped here, if it is
  std::byte* out_map = nullptr;       // its output mapped here, if it is
};

// How this rank reaches each rank's buffers (by group rank; its own entry unused), and the
// mappings (OneSided::map's holds), which the op keeps until its work is done.
struct Reach {
  std::vector<PeerAccess> of;
  std::shared_ptr<std::vector<std::shared_ptr<const void>>> held =
      std::make_shared<std::vector<std::shared_ptr<const void>>>();
};

std::vector<int> others(const Schedule& s) {
  std::vector<int> v;
  for (int p = 0; p < s.size(); ++p) {
    if (p != s.rank()) {
      v.push_back(p);
    }
  }
  return v;
}

// Part 1 where the keys are not known yet (direct forced, no agreement): sends this rank's keys
// to `tell`, receives those of `hear_from`, and builds the rest with `build` once they arrived.
// False (nothing added) where the keys are known.
bool keys_first(Schedule& s, const CollectiveArgs& a, const std::vector<int>& tell,
                const std::vector<int>& hear_from,
                void (*build)(Schedule&, const CollectiveArgs&)) {
  if (a.keys != nullptr) {
    return false;
  }
  auto* of =
      static_cast<BufferKeys*>(s.scratch(sizeof(BufferKeys) * static_cast<std::size_t>(s.size())));
  BufferKeys& mine = of[s.rank()];
  const Extents e = extents_of(a, s.size());
  mine = {a.one_sided->register_buffer(a.in, e.in), a.one_sided->register_buffer(a.out, e.out)};
  for (int p : tell) {
    s.send(p, &mine, sizeof mine);
  }
  for (int p : hear_from) {
    s.recv(p, &of[p], sizeof(BufferKeys));
  }
  CollectiveArgs rest = a;
  rest.keys = of;
  s.then([rest, build](Schedule& next) {
    next.set_algorithm(algorithm_name(AlgorithmId::direct));
    build(next, rest);
  });
  return true;
}

// Part 3: once `done` (and the op's mappings dropped), a message to `tell`, and one from each of
// `wait_for`.
void release(Schedule& s, TaskId done, const Reach& reach, const std::vector<int>& tell,
             const std::vector<int>& wait_for) {
  const TaskId dropped = s.call(
      [held = reach.held] {
        held->clear();
        return std::optional<LocalFailure>{};
      },
      {done});
  auto* flags = static_cast<std::uint8_t*>(
      s.scratch(kReleaseBytes * (static_cast<std::size_t>(s.size()) + 1)));
  std::memset(flags, 1, kReleaseBytes);
  for (int p : tell) {
    s.send(p, flags, kReleaseBytes, {dropped});
  }
  for (int p : wait_for) {
    s.recv(p, flags + kReleaseBytes * static_cast<std::size_t>(1 + p), kReleaseBytes);
  }
}

// The peer's buffer mapped here, or nullptr (not a SharedBuffer, or not mappable: logged at
// INFO, and the op goes on through read and write tasks).
std::byte* map_buffer(const CollectiveArgs& a, int peer, const MemoryKey& key, std::size_t extent,
                      Reach& reach) {
  if (extent == 0 || !a.one_sided->mappable(key)) {
    return nullptr;
  }
  std::string why;
  PeerView v = a.one_sided->map(peer, key, why);
  if (v.at == nullptr) {
    CHORUS_INFO(coll,
                "rank {}'s SharedBuffer cannot be mapped here ({}); reading and writing it "
                "through the transport's one-sided transfers",
                peer, why);
    return nullptr;
  }
  reach.held->push_back(std::move(v.hold));
  return v.at;
}

// How this rank reaches the buffers of `peers` (a.keys holds every rank's keys), mapping the
// peers' SharedBuffers where they are.
Reach reach_peers(const CollectiveArgs& a, int n, const std::vector<int>& peers) {
  const Extents e = extents_of(a, n);
  Reach reach;
  reach.of.resize(static_cast<std::size_t>(n));
  for (int q : peers) {
    PeerAccess& p = reach.of[static_cast<std::size_t>(q)];
    p.peer = q;
    p.in = &a.keys[q].in;
    p.out = &a.keys[q].out;
    p.in_map = map_buffer(a, q, a.keys[q].in, e.in, reach);
    p.out_map = map_buffer(a, q, a.keys[q].out, e.out, reach);
  }
  return reach;
}

// Whether every peer's input (and, with `outputs`, output) is mapped here.
bool all_mapped(const std::vector<PeerAccess>& of, int r, bool outputs) {
  for (std::size_t q = 0; q < of.size(); ++q) {
    if (static_cast<int>(q) != r &&
        (of[q].in_map == nullptr || (outputs && of[q].out_map == nullptr))) {
      return false;
    }
  }
  return true;
}

// Every peer mapped: reduces `count` elements at element `in_offset` of every rank's input,
// piece by piece, into into(done) (this rank's memory; `done` elements of the count before it),
// and hands each finished piece to `then(done, count)` before the next one. Sources: this rank's
// own input (in place: the destination itself) first, then the others in rank order.
template <typename Into, typename Then>
void reduce_mapped(const CollectiveArgs& a, const std::vector<PeerAccess>& of, int n, int r,
                   std::size_t count, std::size_t in_offset, Into into, Then then) {
  const std::size_t es = element_size(a.dtype);
  const std::size_t per = std::max<std::size_t>(1, kPieceBytes / es);
  const int divisor = a.op == ReduceOp::avg ? n : 0;
  for (std::size_t done = 0; done < count; done += per) {
    const std::size_t cnt = std::min(per, count - done);
    const std::size_t off = (in_offset + done) * es;  // into the inputs
    std::byte* dst = into(done);
    const auto* own = static_cast<const std::byte*>(a.in) + off;
    int step = 0;
    for (int q = 0; q < n; ++q) {
      if (q == r) {
        continue;
      }
      ++step;
      reduce(dst, step == 1 ? own : dst, of[static_cast<std::size_t>(q)].in_map + off, cnt, a.dtype,
             a.op, step == n - 1 ? divisor : 0);
    }
    then(done, cnt);
  }
}

// Allreduce of `chunk` with every peer mapped and the op larger than the caches: each piece is
// reduced into `piece` (it stays in L2) and then streamed to every output, this rank's own
// included, with non-temporal stores, so no output line is read from memory before it is
// overwritten (stream_copy.hpp). Per rank the count is read once and written once, and nothing
// more crosses the memory bus.
void reduce_and_stream(const CollectiveArgs& a, const std::vector<PeerAccess>& of, int n, int r,
                       std::byte* piece, Span chunk) {
  const std::size_t es = element_size(a.dtype);
  reduce_mapped(
      a, of, n, r, chunk.count, chunk.offset, [piece](std::size_t) { return piece; },
      [&](std::size_t done, std::size_t cnt) {
        const std::size_t off = (chunk.offset + done) * es;
        stream_copy(static_cast<std::byte*>(a.out) + off, piece, cnt * es);
        for (int q = 0; q < n; ++q) {
          if (q != r) {
            stream_copy(of[static_cast<std::size_t>(q)].out_map + off, piece, cnt * es);
          }
        }
      });
  stream_fence();  // before the release bytes tell the peers that their outputs are written
}

// Some peer not mapped: the same reduction as tasks. `count` elements at element `in_offset` of
// every rank's input are reduced, piece by piece, into `into` (this rank's memory): its own input
// first, then the others in rank order, a mapped peer's straight from its mapping, another's
// read into its scratch slot first (the next piece's read into that slot waits for the
// reduction that used it). With `write_back` (allreduce), each finished piece then goes to
// every peer's output at the same offset: copied into a mapping, or written.
void reduce_pieces(Schedule& s, const CollectiveArgs& a, const std::vector<PeerAccess>& of,
                   std::size_t count, std::size_t in_offset, std::byte* into, bool write_back) {
  const int n = s.size();
  const int r = s.rank();
  const std::size_t es = element_size(a.dtype);
  const std::size_t per = std::max<std::size_t>(1, kPieceBytes / es);
  const int divisor = a.op == ReduceOp::avg ? n : 0;
  std::vector<std::byte*> slot(static_cast<std::size_t>(n), nullptr);
  std::vector<TaskId> slot_free(static_cast<std::size_t>(n), kNoTask);
  for (int q = 0; q < n; ++q) {
    if (q != r && of[static_cast<std::size_t>(q)].in_map == nullptr && count > 0) {
      slot[static_cast<std::size_t>(q)] =
          static_cast<std::byte*>(s.scratch(std::min(per, count) * es));
    }
  }
  for (std::size_t done = 0; done < count; done += per) {
    const std::size_t cnt = std::min(per, count - done);
    const std::size_t off = (in_offset + done) * es;  // into the inputs
    std::byte* dst = into + done * es;
    const auto* own = static_cast<const std::byte*>(a.in) + off;
    TaskId last = kNoTask;
    int step = 0;
    for (int q = 0; q < n; ++q) {
      if (q == r) {
        continue;
      }
      const auto uq = static_cast<std::size_t>(q);
      const PeerAccess& p = of[uq];
      TaskId got = kNoTask;
      const std::byte* theirs = p.in_map != nullptr ? p.in_map + off : slot[uq];
      if (p.in_map == nullptr) {
        got = s.read(q, p.in, off, slot[uq], cnt * es, {slot_free[uq]});
      }
      ++step;
      last = s.reduce(dst, step == 1 ? own : dst, theirs, cnt, step == n - 1 ? divisor : 0,
                      {last, got});
      if (p.in_map == nullptr) {
        slot_free[uq] = last;
      }
    }
    if (!write_back) {
      continue;
    }
    for (int q = 0; q < n; ++q) {
      const PeerAccess& p = of[static_cast<std::size_t>(q)];
      if (q == r) {
        continue;
      }
      if (p.out_map != nullptr) {
        s.copy(p.out_map + off, dst, cnt * es, {last});
      } else {
        s.write(q, p.out, off, dst, cnt * es, {last});
      }
    }
  }
}

// A peer's whole input to `dst`: copied from its mapping, or read.
void fetch_input(Schedule& s, const PeerAccess& p, void* dst, std::size_t bytes) {
  if (p.in_map != nullptr) {
    s.copy(dst, p.in_map, bytes);
  } else {
    s.read(p.peer, p.in, 0, dst, bytes);
  }
}

// Whether the buffers of `k` that peers touch lie in SharedBuffers: allreduce's input and
// output, the other ops' input (the only buffer peers read; the others write only their own).
bool shares(const CollectiveArgs& a, const BufferKeys& k) {
  return a.one_sided->mappable(k.in) &&
         (a.kind != OpType::allreduce || a.one_sided->mappable(k.out));
}

}  // namespace

void build_memory_agreement(Schedule& s, const CollectiveArgs& a) {
  // The keys ride in the op's signature headers (Schedule::carry_in_header): no message of their
  // own, so where the algorithm talks to every peer the agreement sends nothing extra, and a
  // header still goes out with the first data message behind it (executor.hpp).
  const int n = s.size();
  const int r = s.rank();
  auto* of = static_cast<BufferKeys*>(s.scratch(sizeof(BufferKeys) * static_cast<std::size_t>(n)));
  const Extents e = extents_of(a, n);
  of[r] = {a.one_sided->register_buffer(a.in, e.in), a.one_sided->register_buffer(a.out, e.out)};
  s.carry_in_header(&of[r], sizeof(BufferKeys));
  CollectiveArgs rest = a;
  rest.keys = of;
  if (!shares(a, of[r])) {
    // Not every rank passed SharedBuffers: this rank knows the outcome without waiting for
    // the keys, and its algorithm starts at once, behind the headers (it never reads the
    // peers' keys: the direct algorithms are not chosen for private buffers).
    rest.shared_buffers = false;
    build_chosen(s, rest);
    return;
  }
  // Every header has arrived once the first phase (the headers alone) completed.
  s.set_algorithm("memory_agreement");
  s.then([rest, of, n, r](Schedule& next) mutable {
    for (int q = 0; q < n; ++q) {
      if (q != r) {
        std::memcpy(&of[q], next.received_payload(q), sizeof(BufferKeys));
      }
    }
    rest.shared_buffers = true;
    for (int q = 0; q < n; ++q) {
      rest.shared_buffers = rest.shared_buffers && shares(rest, rest.keys[q]);
    }
    build_chosen(next, rest);
  });
}

void build_direct_allreduce(Schedule& s, const CollectiveArgs& a) {
  const std::vector<int> peers = others(s);
  if (keys_first(s, a, peers, peers, build_direct_allreduce)) {
    return;
  }
  const int n = s.size();
  const int r = s.rank();
  const Span chunk = block_of(a.count, n, r);
  const std::size_t es = element_size(a.dtype);
  const Reach reach = reach_peers(a, n, peers);
  std::byte* into = static_cast<std::byte*>(a.out) + chunk.offset * es;
  const TaskId first = s.next_id();
  if (all_mapped(reach.of, r, true)) {
    auto* piece = static_cast<std::byte*>(s.scratch(std::min(kPieceBytes, chunk.count * es)));
    s.call([a, of = reach.of, n, r, piece, chunk, es, into]() -> std::optional<LocalFailure> {
      const bool out_of_cache = a.count * es * static_cast<std::size_t>(n) >= kStreamMinGroupBytes;
      if (a.in != a.out && out_of_cache) {
        reduce_and_stream(a, of, n, r, piece, chunk);
        return std::nullopt;
      }
      reduce_mapped(
          a, of, n, r, chunk.count, chunk.offset,
          [&](std::size_t done) { return into + done * es; },
          [&](std::size_t done, std::size_t cnt) {
            const std::size_t off = (chunk.offset + done) * es;
            for (int q = 0; q < n; ++q) {
              if (q != r) {
                std::memcpy(of[static_cast<std::size_t>(q)].out_map + off, into + done * es,
                            cnt * es);
              }
            }
          });
      return std::nullopt;
    });
  } else {
    reduce_pieces(s, a, reach.of, chunk.count, chunk.offset, into, true);
  }
  release(s, s.join_range(first, s.next_id()), reach, peers, peers);
}

void build_direct_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  const std::vector<int> peers = others(s);
  if (keys_first(s, a, peers, peers, build_direct_reduce_scatter)) {
    return;
  }
  const int n = s.size();
  const int r = s.rank();
  const std::size_t m = a.count;
  const std::size_t in_offset = static_cast<std::size_t>(r) * m;
  const Reach reach = reach_peers(a, n, peers);
  auto* into = static_cast<std::byte*>(a.out);
  const TaskId first = s.next_id();
  if (all_mapped(reach.of, r, false)) {
    s.call([a, of = reach.of, n, r, m, in_offset, into]() -> std::optional<LocalFailure> {
      const std::size_t es = element_size(a.dtype);
      reduce_mapped(
          a, of, n, r, m, in_offset, [&](std::size_t done) { return into + done * es; },
          [](std::size_t, std::size_t) {});
      return std::nullopt;
    });
  } else {
    reduce_pieces(s, a, reach.of, m, in_offset, into, false);
  }
  release(s, s.join_range(first, s.next_id()), reach, peers, peers);
}

void build_direct_allgather(Schedule& s, const CollectiveArgs& a) {
  const std::vector<int> peers = others(s);
  if (keys_first(s, a, peers, peers, build_direct_allgather)) {
    return;
  }
  const int r = s.rank();
  const std::size_t bytes = a.count * element_size(a.dtype);
  auto* out = static_cast<std::byte*>(a.out);
  s.copy(out + static_cast<std::size_t>(r) * bytes, a.in, bytes);
  const Reach reach = reach_peers(a, s.size(), peers);
  const TaskId first = s.next_id();
  for (int q : peers) {
    fetch_input(s, reach.of[static_cast<std::size_t>(q)], out + static_cast<std::size_t>(q) * bytes,
                bytes);
  }
  release(s, s.join_range(first, s.next_id()), reach, peers, peers);
}

void build_direct_broadcast(Schedule& s, const CollectiveArgs& a) {
  const int root = a.root;
  if (s.rank() == root) {
    // The root only lends its buffer: it waits until every reader is done with it.
    const std::vector<int> peers = others(s);
    if (keys_first(s, a, peers, {}, build_direct_broadcast)) {
      return;
    }
    release(s, kNoTask, Reach{}, {}, peers);
    return;
  }
  if (keys_first(s, a, {}, {root}, build_direct_broadcast)) {
    return;
  }
  const Reach reach = reach_peers(a, s.size(), {root});
  const TaskId first = s.next_id();
  fetch_input(s, reach.of[static_cast<std::size_t>(root)], a.out, a.count * element_size(a.dtype));
  release(s, s.join_range(first, s.next_id()), reach, {root}, {});
}

AlgorithmRows direct_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allreduce, AlgorithmId::direct, direct_runs, direct_may_be_default, false,
       direct_allreduce_us, build_direct_allreduce},
      {OpType::allgather, AlgorithmId::direct, direct_runs, direct_may_be_default, false,
       direct_block_us, build_direct_allgather},
      {OpType::reduce_scatter, AlgorithmId::direct, direct_runs, direct_may_be_default, false,
       direct_block_us, build_direct_reduce_scatter},
      {OpType::broadcast, AlgorithmId::direct, direct_runs, direct_may_be_default, false,
       direct_broadcast_us, build_direct_broadcast},
  };
  return kRows;
}

}  // namespace chorus::cpu
