// SPDX-License-Identifier: BSD-3-Clause
// Single-copy ("direct") collectives for a group whose ranks all run on one host and reach
// each other's memory (peer_memory.hpp; CollectiveArgs::peer_memory). A ring over shared
// memory copies every byte twice per hop (into the ring, out of it) and, for allreduce, makes
// n-1 hops of reduce-scatter and n-1 of allgather; here each rank reads what it needs straight
// from the other ranks' buffers, once.
//
// Every op has three parts:
//   1. each rank tells its peers where its buffers are (pid and addresses, one small message
//      on the collective stream, after the signature header);
//   2. a call task does the work through process_vm_readv/writev;
//   3. each rank tells its peers it is done with their memory (one byte), and the op ends
//      only when every peer whose memory may still be touched said so: until then a rank's
//      buffers stay valid (its op has not completed, so its caller cannot reuse them).
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
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/reduce.hpp"
#include "tcp/algorithms/algorithms.hpp"
#include "tcp/peer_memory.hpp"

namespace chorus::tcp {
namespace {

// Bytes reduced per step: a scratch piece and the output piece it is reduced into stay in the
// L2 cache until the piece has been written to every peer.
constexpr std::size_t kPieceBytes = 128 * 1024;

// What a rank tells its peers: its pid and its buffers (addresses in its own address space).
struct Buffers {
  std::int64_t pid = 0;
  std::uint64_t in = 0;
  std::uint64_t out = 0;
};

struct Exchange {
  Buffers* of = nullptr;      // by group rank (this rank's own entry included)
  std::vector<TaskId> heard;  // the receives of the peers' entries
};

// Part 1: sends this rank's Buffers to `tell` and receives those of `hear_from`.
Exchange exchange_buffers(Schedule& s, const CollectiveArgs& a, const std::vector<int>& tell,
                          const std::vector<int>& hear_from) {
  Exchange x;
  x.of = static_cast<Buffers*>(s.scratch(sizeof(Buffers) * static_cast<std::size_t>(s.size())));
  Buffers& mine = x.of[s.rank()];
  mine = {static_cast<std::int64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(a.in),
          reinterpret_cast<std::uintptr_t>(a.out)};
  for (int p : tell) {
    s.send(p, &mine, sizeof mine);
  }
  for (int p : hear_from) {
    x.heard.push_back(s.recv(p, &x.of[p], sizeof(Buffers)));
  }
  return x;
}

// Parts 2 and 3: `work` once every entry arrived, then a byte to `tell` and one from each of
// `wait_for`.
void run_then_release(Schedule& s, const Exchange& x, LocalWork work, const std::vector<int>& tell,
                      const std::vector<int>& wait_for) {
  const TaskId done = s.call(std::move(work));
  for (TaskId h : x.heard) {
    s.depend(done, h);
  }
  auto* flags = static_cast<std::uint8_t*>(s.scratch(static_cast<std::size_t>(s.size()) + 1));
  flags[0] = 1;
  for (int p : tell) {
    s.send(p, flags, 1, {done});
  }
  for (int p : wait_for) {
    s.recv(p, flags + 1 + p, 1);
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

std::optional<LocalFailure> failed(int peer, const char* reading, const std::string& err) {
  return LocalFailure{peer,
                      fmt::format("{} rank {}'s buffer on this host failed: {}; if the kernel "
                                  "refuses, CHORUS_ALGO can force another algorithm (e.g. "
                                  "allreduce=ring)",
                                  reading, peer, err)};
}

// Reduces `count` elements at element `in_offset` of every rank's input into `into` (this rank's
// memory), piece by piece, and hands each finished piece to `then(offset, count)` before the
// next one. Sources: this rank's own input (in place: `into` itself) first, then the others in
// rank order.
template <typename Then>
std::optional<LocalFailure> reduce_chunk(const CollectiveArgs& a, const Buffers* of, int n, int r,
                                         std::byte* piece, std::size_t count, std::size_t in_offset,
                                         std::byte* into, Then then) {
  const std::size_t es = element_size(a.dtype);
  const std::size_t per = std::max<std::size_t>(1, kPieceBytes / es);
  const int divisor = a.op == ReduceOp::avg ? n : 0;
  for (std::size_t done = 0; done < count; done += per) {
    const std::size_t cnt = std::min(per, count - done);
    const std::size_t off = (in_offset + done) * es;  // into the inputs
    std::byte* dst = into + done * es;
    const auto* own = static_cast<const std::byte*>(a.in) + off;
    int step = 0;
    for (int q = 0; q < n; ++q) {
      if (q == r) {
        continue;
      }
      if (std::string err = read_peer_memory(of[q].pid, piece, of[q].in + off, cnt * es);
          !err.empty()) {
        return failed(q, "reading", err);
      }
      ++step;
      reduce(dst, step == 1 ? own : dst, piece, cnt, a.dtype, a.op, step == n - 1 ? divisor : 0);
    }
    if (auto f = then(done, cnt)) {
      return f;
    }
  }
  return std::nullopt;
}

}  // namespace

void build_direct_allreduce(Schedule& s, const CollectiveArgs& a) {
  const int n = s.size();
  const int r = s.rank();
  const std::vector<int> peers = others(s);
  const Exchange x = exchange_buffers(s, a, peers, peers);
  const Span chunk = block_of(a.count, n, r);
  const std::size_t es = element_size(a.dtype);
  auto* piece = static_cast<std::byte*>(s.scratch(std::min(kPieceBytes, chunk.count * es)));
  const Buffers* of = x.of;
  LocalWork work = [a, of, n, r, piece, chunk, es]() -> std::optional<LocalFailure> {
    std::byte* into = static_cast<std::byte*>(a.out) + chunk.offset * es;
    return reduce_chunk(a, of, n, r, piece, chunk.count, chunk.offset, into,
                        [&](std::size_t done, std::size_t cnt) -> std::optional<LocalFailure> {
                          const std::size_t off = (chunk.offset + done) * es;
                          for (int q = 0; q < n; ++q) {
                            if (q == r) {
                              continue;
                            }
                            if (std::string err = write_peer_memory(of[q].pid, of[q].out + off,
                                                                    into + done * es, cnt * es);
                                !err.empty()) {
                              return failed(q, "writing into", err);
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
  const Exchange x = exchange_buffers(s, a, peers, peers);
  const std::size_t m = a.count;
  const std::size_t es = element_size(a.dtype);
  auto* piece = static_cast<std::byte*>(s.scratch(std::min(kPieceBytes, m * es)));
  const Buffers* of = x.of;
  LocalWork work = [a, of, n, r, piece, m]() -> std::optional<LocalFailure> {
    return reduce_chunk(a, of, n, r, piece, m, static_cast<std::size_t>(r) * m,
                        static_cast<std::byte*>(a.out),
                        [](std::size_t, std::size_t) { return std::optional<LocalFailure>{}; });
  };
  run_then_release(s, x, std::move(work), peers, peers);
}

void build_direct_allgather(Schedule& s, const CollectiveArgs& a) {
  const int r = s.rank();
  const std::vector<int> peers = others(s);
  const Exchange x = exchange_buffers(s, a, peers, peers);
  const std::size_t bytes = a.count * element_size(a.dtype);
  s.copy(static_cast<std::byte*>(a.out) + static_cast<std::size_t>(r) * bytes, a.in, bytes);
  const Buffers* of = x.of;
  LocalWork work = [a, of, peers, bytes]() -> std::optional<LocalFailure> {
    for (int q : peers) {
      std::byte* dst = static_cast<std::byte*>(a.out) + static_cast<std::size_t>(q) * bytes;
      if (std::string err = read_peer_memory(of[q].pid, dst, of[q].in, bytes); !err.empty()) {
        return failed(q, "reading", err);
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
    const Exchange x = exchange_buffers(s, a, peers, {});
    run_then_release(
        s, x, [] { return std::optional<LocalFailure>{}; }, {}, peers);
    return;
  }
  const Exchange x = exchange_buffers(s, a, {}, {root});
  const Buffers* of = x.of;
  LocalWork work = [a, of, root, bytes]() -> std::optional<LocalFailure> {
    if (std::string err = read_peer_memory(of[root].pid, a.out, of[root].in, bytes); !err.empty()) {
      return failed(root, "reading", err);
    }
    return std::nullopt;
  };
  run_then_release(s, x, std::move(work), {root}, {});
}

}  // namespace chorus::tcp
