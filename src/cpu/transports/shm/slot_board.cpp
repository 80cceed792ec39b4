// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/shm/slot_board.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "core/futex.hpp"
#include "core/reduce.hpp"
#include "cpu/transports/shm/shm_segment.hpp"

namespace chorus::cpu {

// A sequence number and a signature on one cache line. Written by its rank only; readers in
// other processes take a consistent copy as in a seqlock: the writer clears `seq`, writes the
// signature, then sets `seq`; a reader that sees the same nonzero seq before and after its copy
// has the signature that goes with it.
struct alignas(64) SlotBoard::Line {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint64_t> sig[kSignatureBytes / 8]{};

  void write(std::uint64_t s_seq, const EncodedSignature& bytes) noexcept {
    seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t i = 0; i < kSignatureBytes / 8; ++i) {
      std::uint64_t word;
      std::memcpy(&word, bytes.data() + 8 * i, 8);
      sig[i].store(word, std::memory_order_relaxed);
    }
    seq.store(s_seq, std::memory_order_release);
  }

  // The seq written last and its signature's bytes in `bytes`; 0 while a write is under way
  // (or none was).
  std::uint64_t read(EncodedSignature& bytes) const noexcept {
    const std::uint64_t before = seq.load(std::memory_order_acquire);
    if (before == 0) {
      return 0;
    }
    for (std::size_t i = 0; i < kSignatureBytes / 8; ++i) {
      const std::uint64_t word = sig[i].load(std::memory_order_relaxed);
      std::memcpy(bytes.data() + 8 * i, &word, 8);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return seq.load(std::memory_order_relaxed) == before ? before : 0;
  }

  // The seq and signature written last; nullopt while a write is under way (or none was).
  std::optional<std::pair<std::uint64_t, OpSignature>> read() const noexcept {
    EncodedSignature bytes;
    const std::uint64_t before = read(bytes);
    if (before == 0) {
      return std::nullopt;
    }
    const std::optional<OpSignature> s = decode_signature(bytes.data());
    if (!s) {
      return std::nullopt;
    }
    return std::make_pair(before, *s);
  }
};

namespace {

constexpr std::size_t kBoardLine = 64;
// Per rank: current line, wake word, the CPUs it may run on, then two buffers of (header line +
// payload).
constexpr std::size_t kBufferStride = kBoardLine + SlotBoard::kSlotBytes;
// A payload of up to kInlineBytes starts in its header line's spare bytes, after the seq and the
// signature: a reader then gets it with the header in one cache-line transfer, not a second one
// after ready() (8-byte allreduce at 2 ranks: see slot_board.hpp). Larger payloads start on the
// line after the header, 64-byte aligned for the vector reductions.
constexpr std::size_t kInlineOffset = 8 + kSignatureBytes;
constexpr std::size_t kInlineBytes = kBoardLine - kInlineOffset;
static_assert(kInlineOffset % 8 == 0, "inline payloads keep every dtype's alignment");
constexpr std::size_t kMaskWords = CPU_SETSIZE / 64;
constexpr std::size_t kMaskOffset = 2 * kBoardLine;
constexpr std::size_t kBuffersOffset = kMaskOffset + 3 * kBoardLine;
constexpr std::size_t kRankStride = kBuffersOffset + 2 * kBufferStride;

// wait(): polls this many times (about 7 us: a `pause` takes some 28 ns here) before it yields,
// and yields for this long before it sleeps. It looks at the headers after every `pause`: looking
// at every 16th added up to 450 ns to noticing a publish (8-byte allreduce at 2 ranks: 0.98 us
// per op looking at every 16th, 0.69 looking at every one, medians of 22 runs). With more ranks
// than cores a waiting rank must give its core to the rank it waits for at once: it yields from
// the first look (measured on 2 cores, 8-byte allreduce at 4 ranks: 11-22 us with the spin,
// 4.5-6.5 us without; 2 ranks: no change). Yielding for 30 or 100 us instead of 10 made neither
// 2 nor 4 ranks faster.
constexpr int kSpins = 256;
constexpr auto kYieldFor = std::chrono::microseconds(10);

// A payload that fits in its header's line, copied without a call into the C library (whose
// memcpy spends more instructions choosing a method than these few words take).
void copy_inline(std::byte* to, const std::byte* from, std::size_t bytes) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    __builtin_memcpy(&word, from + i, 8);
    __builtin_memcpy(to + i, &word, 8);
  }
  for (; i < bytes; ++i) {
    to[i] = from[i];
  }
}

// The CPUs the calling thread may run on: its affinity mask, or every CPU if that is unknown.
cpu_set_t usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < std::min<long>(std::max(online, 1L), CPU_SETSIZE); ++cpu) {
      CPU_SET(static_cast<int>(cpu), &set);
    }
  }
  return set;
}

// A sleeping waiter wakes at least this often (its caller looks at failures and deadlines).
constexpr auto kSleepSlice = std::chrono::milliseconds(1);

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::size_t SlotBoard::bytes_for(int ranks) noexcept {
  return kRankStride * static_cast<std::size_t>(ranks);
}

// A rank's affinity mask on the board, written once when its board is made. Three lines.
struct alignas(64) SlotBoard::CpuMask {
  std::atomic<std::uint64_t> written{0};  // 1 once `bits` holds the mask (release)
  std::uint64_t bits[kMaskWords]{};
};

SlotBoard::SlotBoard(std::shared_ptr<ShmSegment> segment, int rank, int size) noexcept
    : segment_(std::move(segment)), area_(segment_->board()), rank_(rank), size_(size) {
  static_assert(sizeof(Line) == kBoardLine && sizeof(WakeWord) == kBoardLine);
  static_assert(sizeof(CpuMask) <= kBuffersOffset - kMaskOffset);
  static_assert(sizeof(cpu_set_t) == sizeof(CpuMask::bits));
  const cpu_set_t mine = usable_cpus();
  CpuMask& m = mask(rank_);
  std::memcpy(m.bits, &mine, sizeof(mine));
  m.written.store(1, std::memory_order_release);
  // Until every rank's mask is on the board: this rank's CPUs alone. Too few when each rank is
  // bound to a core of its own (chorusrun --bind-to core), so it is settled again later.
  spins_ = size_ > CPU_COUNT(&mine) ? 0 : kSpins;
}

bool SlotBoard::spins() const noexcept {
  if (!spins_settled_) {
    // The CPUs the host's ranks may run on together: with fewer than ranks, a rank that waits
    // holds a CPU that a late rank needs.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int p = 0; p < size_; ++p) {
      const CpuMask& m = mask(p);
      if (m.written.load(std::memory_order_acquire) == 0) {
        return spins_ != 0;  // that rank has not made its board yet
      }
      cpu_set_t theirs;
      std::memcpy(&theirs, m.bits, sizeof(theirs));
      CPU_OR(&all, &all, &theirs);
    }
    spins_ = size_ > CPU_COUNT(&all) ? 0 : kSpins;
    spins_settled_ = true;
  }
  return spins_ != 0;
}

SlotBoard::CpuMask& SlotBoard::mask(int rank) const noexcept {
  return *std::launder(reinterpret_cast<CpuMask*>(
      area_ + kRankStride * static_cast<std::size_t>(rank) + kMaskOffset));
}

SlotBoard::Line& SlotBoard::current(int rank) const noexcept {
  return *std::launder(
      reinterpret_cast<Line*>(area_ + kRankStride * static_cast<std::size_t>(rank)));
}

WakeWord& SlotBoard::wake(int rank) const noexcept {
  return *std::launder(reinterpret_cast<WakeWord*>(
      area_ + kRankStride * static_cast<std::size_t>(rank) + kBoardLine));
}

SlotBoard::Line& SlotBoard::header(int rank, int buffer) const noexcept {
  return *std::launder(
      reinterpret_cast<Line*>(area_ + kRankStride * static_cast<std::size_t>(rank) +
                              kBuffersOffset + kBufferStride * static_cast<std::size_t>(buffer)));
}

std::byte* SlotBoard::data(int rank, int buffer, std::size_t bytes) const noexcept {
  return reinterpret_cast<std::byte*>(&header(rank, buffer)) +
         (bytes <= kInlineBytes ? kInlineOffset : kBoardLine);
}

void SlotBoard::announce(const OpSignature& sig) noexcept {
  current(rank_).write(sig.seq, encode(sig));
}

void SlotBoard::publish(const OpSignature& sig, const void* in, std::size_t bytes) noexcept {
  // The slot header is the announcement: the current line is left as the last op off the board
  // wrote it (ready() and missing() read both), which spares the peers a second line to fetch.
  published_ = encode(sig);
  const int buffer = static_cast<int>(rounds_ % 2);
  std::byte* to = data(rank_, buffer, bytes);
  if (bytes <= kInlineBytes) {
    copy_inline(to, static_cast<const std::byte*>(in), bytes);
  } else {
    std::memcpy(to, in, bytes);
  }
  header(rank_, buffer).write(sig.seq, published_);  // seq last (release): payload visible with it
}

void SlotBoard::wake_peers() noexcept {
  // wake_if_sleeping()'s fence orders the publish before the look at the sleepers' flags.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      continue;
    }
    // A thread waiting in wait() sleeps on the board's word; an engine running a board op
    // sleeps in the transport on the segment's (ShmTransport::before_poll, PollHint::small_op).
    // The group's ranks are the host's, so the group rank is the segment's index.
    wake_if_sleeping(wake(p));
    wake_if_sleeping(segment_->wake(p));
  }
}

bool SlotBoard::ready(const OpSignature& sig, std::optional<Mismatch>& mismatch) const noexcept {
  const int buffer = static_cast<int>(rounds_ % 2);
  bool all = true;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      continue;
    }
    // The usual case: the peer's slot holds this op, in the very bytes this rank published.
    EncodedSignature theirs;
    if (header(p, buffer).read(theirs) == sig.seq && theirs == published_) {
      continue;
    }
    // The usual case while waiting: the peer's slot and current line both hold earlier ops (or
    // are being written), so it has not got here yet; nothing to decode.
    if (header(p, buffer).seq.load(std::memory_order_acquire) < sig.seq &&
        current(p).seq.load(std::memory_order_acquire) < sig.seq) {
      all = false;
      continue;
    }
    auto published = header(p, buffer).read();
    if (published && published->first > sig.seq) {
      // Its slot holds a later board op: it cannot have finished this one without this rank,
      // so it counts its board ops differently (it issued other collectives).
      mismatch = Mismatch{p, published->second};
      return false;
    }
    if (!published || published->first != sig.seq) {
      // Not published when looked at: a peer that runs another op at this seq, or has gone
      // past it, issued a different sequence of collectives. It may also have published, run
      // this op and started the next since the first look: a second look at the slot tells
      // (the slot is written before the next op is announced).
      const auto running = current(p).read();
      if (!running || running->first < sig.seq || running->second == sig) {
        all = false;
        continue;
      }
      published = header(p, buffer).read();
      if (!published || published->first != sig.seq) {
        mismatch = Mismatch{p, running->second};
        return false;
      }
    }
    if (!(published->second == sig)) {
      mismatch = Mismatch{p, published->second};
      return false;
    }
  }
  return all;
}

void SlotBoard::finish(void* out, std::size_t count, DataType dtype, ReduceOp op) noexcept {
  const int buffer = static_cast<int>(rounds_ % 2);
  const std::size_t bytes = count * element_size(dtype);
  // Rank order on every rank: the same operations in the same order give the same bits. (A
  // board has at least 2 ranks: a segment is shared by several.)
  for (int p = 1; p < size_; ++p) {
    const void* acc = p == 1 ? static_cast<const void*>(data(0, buffer, bytes)) : out;
    reduce(out, acc, data(p, buffer, bytes), count, dtype, op, p == size_ - 1 ? size_ : 0);
  }
  ++rounds_;
}

std::vector<std::pair<int, std::uint64_t>> SlotBoard::missing(std::uint64_t seq) const noexcept {
  std::vector<std::pair<int, std::uint64_t>> late;
  const int buffer = static_cast<int>(rounds_ % 2);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      continue;
    }
    const auto published = header(p, buffer).read();
    if (!published || published->first != seq) {
      // The peer's latest op: announced (off the board) or published in either buffer.
      std::uint64_t last = 0;
      for (const Line* line : {&current(p), &header(p, 0), &header(p, 1)}) {
        const auto seen = line->read();
        last = std::max(last, seen ? seen->first : 0);
      }
      late.emplace_back(p, last);
    }
  }
  return late;
}

std::uint64_t SlotBoard::snapshot() const noexcept {
  // A publish or an announcement bumps a seq in this op's buffer or a current line; the sum of
  // them changes with any of them.
  const int buffer = static_cast<int>(rounds_ % 2);
  std::uint64_t sum = 0;
  for (int p = 0; p < size_; ++p) {
    sum += header(p, buffer).seq.load(std::memory_order_acquire) +
           current(p).seq.load(std::memory_order_acquire);
  }
  return sum;
}

bool SlotBoard::wait(std::uint64_t seen, Deadline until) noexcept {
  // The spin polls the headers: this rank's wake word, the cheapest thing to poll, is bumped
  // only for sleepers.
  auto changed = [&] { return snapshot() != seen; };
  if (changed()) {
    return true;
  }
  const int looks = spins() ? spins_ : 0;
  for (int i = 0; i < looks; ++i) {
    cpu_relax();
    if (changed()) {
      return true;
    }
  }
  const auto yield_until = Clock::now() + kYieldFor;
  while (Clock::now() < yield_until) {
    ::sched_yield();
    if (changed()) {
      return true;
    }
  }
  // One thread per rank waits on the board at a time (the op's runner), so a flag will do. Pairs
  // with the fence in wake_if_sleeping(): either the publisher sees the flag, or the last look
  // here sees its publish.
  WakeWord& w = wake(rank_);
  const std::uint32_t seq = w.seq.load(std::memory_order_acquire);
  w.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool seen_change = changed();
  if (!seen_change && !until.expired()) {
    futex_wait(w.seq, seq, std::min<std::chrono::nanoseconds>(until.remaining(), kSleepSlice));
    seen_change = changed();
  }
  w.sleeping.store(0, std::memory_order_relaxed);
  return seen_change;
}

}  // namespace chorus::cpu
