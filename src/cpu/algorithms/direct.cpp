// SPDX-License-Identifier: BSD-3-Clause
// Single-copy ("direct") collectives for a group whose transport offers one-sided access to
// the peers' memory (transport.hpp, OneSided; CollectiveArgs::one_sided: every rank on one
// host, in reach). A ring over shared memory copies every byte twice per hop (into the ring,
// out of it) and, for allreduce, makes n-1 hops of reduce-scatter and n-1 of allgather; here
// each rank reads what it needs straight from the other ranks' buffers, once.
//
// Every op has three parts:
//   1. each rank registers its buffers with the transport and sends the keys to its peers:
//      inside the op's signature headers where the memory kinds chose the algorithm
//      (build_memory_agreement), else (direct forced) as one small message on the collective
//      stream, after the signature header;
//   2. a call task does the work: where a peer's buffer can be mapped (OneSided::map: it lies
//      in a SharedBuffer) with plain memcpy and reductions straight from it, without a scratch
//      piece or a system call per piece; elsewhere through OneSided::post_read/post_write
//      (process_vm_readv/writev), which complete inline;
//   3. each rank tells its peers it is done with their memory (one message), and the op ends
//      only when every peer whose memory may still be touched said so: until then a rank's
//      buffers stay valid (its op has not completed, so its caller cannot reuse them).
// Part 1 also decides, where the choice of algorithm depends on the memory kinds, which
// algorithm runs (build_memory_agreement below).
//
// allreduce: rank r owns chunk r (block_of(count, n, r)). Piece by piece (kPieceBytes, to stay
//   in cache), it reads chunk r of every other rank's input into a scratch piece and reduces it
//   into its own output, starting from its own input, in rank order of the others; then it
//   writes the finished piece into every other rank's output. Chunk r of every buffer is
//   touched by rank r alone, so in place is safe, and all ranks end with the same bits (one
//   rank computed each). Memory traffic per rank: the count read once and written once, the
//   least an allreduce can do (a ring at n = 4 reads and writes nearly twice that, besides
//   copying every message into and out of a shared ring).
// reduce_scatter: rank r reads chunk r of every other input and reduces it into its output.
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

#include <fmt/format.h>

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

// How this rank reaches one peer's buffers: mapped here, or else through the keys.
struct PeerAccess {
  int peer = -1;
  const MemoryKey* in = nullptr;
  const MemoryKey* out = nullptr;
  const std::byte* in_map = nullptr;  // the peer's input mapped here, if it is
  std::byte* out_map = nullptr;       // its output mapped here, if it is
  std::vector<std::shared_ptr<const void>> held;
};

struct Exchange {
  const BufferKeys* of = nullptr;  // by group rank (this rank's own entry included)
  std::vector<TaskId> heard;       // the receives of the peers' entries (none: exchanged before)
};

// Part 1: sends this rank's keys to `tell` and receives those of `hear_from`; or, in the
// second phase of an agreed op, the keys its first phase exchanged.
Exchange exchange_keys(Schedule& s, const CollectiveArgs& a, const std::vector<int>& tell,
                       const std::vector<int>& hear_from) {
  Exchange x;
  if (a.keys != nullptr) {
    x.of = a.keys;
    return x;
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
    x.heard.push_back(s.recv(p, &of[p], sizeof(BufferKeys)));
  }
  x.of = of;
  return x;
}

// Parts 2 and 3: `work` once every entry arrived, then a message to `tell` and one from each of
// `wait_for`.
void run_then_release(Schedule& s, const Exchange& x, LocalWork work, const std::vector<int>& tell,
                      const std::vector<int>& wait_for) {
  const TaskId done = s.call(std::move(work));
  for (TaskId h : x.heard) {
    s.depend(done, h);
  }
  auto* flags = static_cast<std::uint8_t*>(
      s.scratch(kReleaseBytes * (static_cast<std::size_t>(s.size()) + 1)));
  std::memset(flags, 1, kReleaseBytes);
  for (int p : tell) {
    s.send(p, flags, kReleaseBytes, {done});
  }
  for (int p : wait_for) {
    s.recv(p, flags + kReleaseBytes * static_cast<std::size_t>(1 + p), kReleaseBytes);
  }
}

std::vector<int> others(const Schedule& s) {
  std::vector<int> v;
  for (int p = 0; p < s.size(); ++p) {
    if (p != s.rank()) {
      v.push_back(p);
    }
  }
  return v;
}

// The peer's buffer mapped here, or nullptr (not a SharedBuffer, or not mappable: logged at
// INFO, and the op goes on through post_read/post_write).
std::byte* map_buffer(const CollectiveArgs& a, int peer, const MemoryKey& key, std::size_t extent,
                      PeerAccess& access) {
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
  access.held.push_back(std::move(v.hold));
  return v.at;
}

// How this rank reaches each rank's buffers (its own entry unused), mapping the peers'
// SharedBuffers where they are.
std::vector<PeerAccess> reach(const CollectiveArgs& a, const BufferKeys* of, int n, int r) {
  const Extents e = extents_of(a, n);
  std::vector<PeerAccess> v(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      continue;
    }
    PeerAccess& p = v[static_cast<std::size_t>(q)];
    p.peer = q;
    p.in = &of[q].in;
    p.out = &of[q].out;
    p.in_map = map_buffer(a, q, of[q].in, e.in, p);
    p.out_map = map_buffer(a, q, of[q].out, e.out, p);
  }
  return v;
}

// Copies `bytes` at byte `offset` of the peer's input to `to`. Returns "" or what failed.
std::string read_input(const CollectiveArgs& a, const PeerAccess& p, void* to, std::size_t offset,
                       std::size_t bytes) {
  if (p.in_map != nullptr) {
    std::memcpy(to, p.in_map + offset, bytes);
    return {};
  }
  return a.one_sided->post_read(p.peer, *p.in, offset, to, bytes, 0).error;
}

// Copies `bytes` from `from` to byte `offset` of the peer's output. Returns "" or what failed.
std::string write_output(const CollectiveArgs& a, const PeerAccess& p, std::size_t offset,
                         const void* from, std::size_t bytes) {
  if (p.out_map != nullptr) {
    std::memcpy(p.out_map + offset, from, bytes);
    return {};
  }
  return a.one_sided->post_write(p.peer, *p.out, offset, from, bytes, 0).error;
}

std::optional<LocalFailure> failed(int peer, const std::string& err) {
  return LocalFailure{peer, fmt::format("{}; if the kernel refuses, CHORUS_ALGO can force another "
                                        "algorithm (e.g. allreduce=ring)",
                                        err)};
}

// Reduces `count` elements at element `in_offset` of every rank's input, piece by piece, into
// into(done) (this rank's memory; `done` elements of the count before it), and hands each
// finished piece to `then(done, count)` before the next one. Sources: this rank's own input
// (in place: the destination itself) first, then the others in rank order, each read straight
// from its mapping or else through `piece`.
template <typename Into, typename Then>
std::optional<LocalFailure> reduce_chunk(const CollectiveArgs& a, const std::vector<PeerAccess>& of,
                                         int n, int r, std::byte* piece, std::size_t count,
                                         std::size_t in_offset, Into into, Then then) {
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
      const PeerAccess& p = of[static_cast<std::size_t>(q)];
      const std::byte* theirs = p.in_map != nullptr ? p.in_map + off : piece;
      if (p.in_map == nullptr) {
        if (std::string err = read_input(a, p, piece, off, cnt * es); !err.empty()) {
          return failed(q, err);
        }
      }
      ++step;
      reduce(dst, step == 1 ? own : dst, theirs, cnt, a.dtype, a.op, step == n - 1 ? divisor : 0);
    }
    if (auto f = then(done, cnt)) {
      return f;
    }
  }
  return std::nullopt;
}

// Whether every peer's input and output are mapped here.
bool all_mapped(const std::vector<PeerAccess>& of, int r) {
  for (std::size_t q = 0; q < of.size(); ++q) {
    if (static_cast<int>(q) != r && (of[q].in_map == nullptr || of[q].out_map == nullptr)) {
      return false;
    }
  }
  return true;
}

// Allreduce of `chunk` with every peer mapped and the op larger than the caches: each piece is
// reduced into `piece` (it stays in L2) and then streamed to every output, this rank's own
// included, with non-temporal stores, so no output line is read from memory before it is
// overwritten (stream_copy.hpp). Per rank the count is read once and written once, and nothing
// more crosses the memory bus.
void reduce_and_stream(const CollectiveArgs& a, const std::vector<PeerAccess>& of, int n, int r,
                       std::byte* piece, Span chunk) {
  const std::size_t es = element_size(a.dtype);
  reduce_chunk(
      a, of, n, r, piece, chunk.count, chunk.offset, [piece](std::size_t) { return piece; },
      [&](std::size_t done, std::size_t cnt) -> std::optional<LocalFailure> {
        const std::size_t off = (chunk.offset + done) * es;
        stream_copy(static_cast<std::byte*>(a.out) + off, piece, cnt * es);
        for (int q = 0; q < n; ++q) {
          if (q != r) {
            stream_copy(of[static_cast<std::size_t>(q)].out_map + off, piece, cnt * es);
          }
        }
        return std::nullopt;
      });
  stream_fence();  // before the release bytes tell the peers that their outputs are written
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
  const int n = s.size();
  const int r = s.rank();
  const std::vector<int> peers = others(s);
  const Exchange x = exchange_keys(s, a, peers, peers);
  const Span chunk = block_of(a.count, n, r);
  const std::size_t es = element_size(a.dtype);
  auto* piece = static_cast<std::byte*>(s.scratch(std::min(kPieceBytes, chunk.count * es)));
  const BufferKeys* buffers = x.of;
  LocalWork work = [a, buffers, n, r, piece, chunk, es]() -> std::optional<LocalFailure> {
    const std::vector<PeerAccess> of = reach(a, buffers, n, r);
    const bool out_of_cache = a.count * es * static_cast<std::size_t>(n) >= kStreamMinGroupBytes;
    if (a.in != a.out && out_of_cache && all_mapped(of, r)) {
      reduce_and_stream(a, of, n, r, piece, chunk);
      return std::nullopt;
    }
    std::byte* into = static_cast<std::byte*>(a.out) + chunk.offset * es;
    return reduce_chunk(
        a, of, n, r, piece, chunk.count, chunk.offset,
        [&](std::size_t done) { return into + done * es; },
        [&](std::size_t done, std::size_t cnt) -> std::optional<LocalFailure> {
          const std::size_t off = (chunk.offset + done) * es;
          for (int q = 0; q < n; ++q) {
            if (q == r) {
              continue;
            }
            if (std::string err = write_output(a, of[static_cast<std::size_t>(q)], off,
                                               into + done * es, cnt * es);
                !err.empty()) {
              return failed(q, err);
            }
          }
          return std::nullopt;
        });
  };
  run_then_release(s, x, std::move(work), peers, peers);
}

void build_direct_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const std::vector<int> peers = others(s);
  const Exchange x = exchange_keys(s, a, peers, peers);
  const std::size_t m = a.count;
  const std::size_t es = element_size(a.dtype);
  auto* piece = static_cast<std::byte*>(s.scratch(std::min(kPieceBytes, m * es)));
  const BufferKeys* buffers = x.of;
  LocalWork work = [a, buffers, n, r, piece, m]() -> std::optional<LocalFailure> {
    const std::vector<PeerAccess> of = reach(a, buffers, n, r);
    const std::size_t es = element_size(a.dtype);
    return reduce_chunk(
        a, of, n, r, piece, m, static_cast<std::size_t>(r) * m,
        [&](std::size_t done) { return static_cast<std::byte*>(a.out) + done * es; },
        [](std::size_t, std::size_t) { return std::optional<LocalFailure>{}; });
  };
  run_then_release(s, x, std::move(work), peers, peers);
}

void build_direct_allgather(Schedule& s, const CollectiveArgs& a) {
  const int r = s.rank();
  const std::vector<int> peers = others(s);
  const Exchange x = exchange_keys(s, a, peers, peers);
  const std::size_t bytes = a.count * element_size(a.dtype);
  s.copy(static_cast<std::byte*>(a.out) + static_cast<std::size_t>(r) * bytes, a.in, bytes);
  const BufferKeys* buffers = x.of;
  LocalWork work = [a, buffers, peers, bytes, r]() -> std::optional<LocalFailure> {
    const std::vector<PeerAccess> of = reach(a, buffers, static_cast<int>(peers.size()) + 1, r);
    for (int q : peers) {
      std::byte* dst = static_cast<std::byte*>(a.out) + static_cast<std::size_t>(q) * bytes;
      if (std::string err = read_input(a, of[static_cast<std::size_t>(q)], dst, 0, bytes);
          !err.empty()) {
        return failed(q, err);
      }
    }
    return std::nullopt;
  };
  run_then_release(s, x, std::move(work), peers, peers);
}

void build_direct_broadcast(Schedule& s, const CollectiveArgs& a) {
  const int root = a.root;
  const std::size_t bytes = a.count * element_size(a.dtype);
  if (s.rank() == root) {
    // The root only lends its buffer: it waits until every reader is done with it.
    const std::vector<int> peers = others(s);
    const Exchange x = exchange_keys(s, a, peers, {});
    run_then_release(
        s, x, [] { return std::optional<LocalFailure>{}; }, {}, peers);
    return;
  }
  const Exchange x = exchange_keys(s, a, {}, {root});
  const BufferKeys* buffers = x.of;
  const int n = s.size();
  const int r = s.rank();
  LocalWork work = [a, buffers, root, bytes, n, r]() -> std::optional<LocalFailure> {
    const std::vector<PeerAccess> of = reach(a, buffers, n, r);
    if (std::string err = read_input(a, of[static_cast<std::size_t>(root)], a.out, 0, bytes);
        !err.empty()) {
      return failed(root, err);
    }
    return std::nullopt;
  };
  run_then_release(s, x, std::move(work), {root}, {});
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
