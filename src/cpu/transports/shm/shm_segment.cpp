// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/shm/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/futex.hpp"
#include "cpu/transports/cma/peer_memory.hpp"
#include "cpu/transports/shm/slot_board.hpp"
#include "net/hmac.hpp"
#include "net/socket.hpp"

namespace chorus::cpu {
namespace {

constexpr std::size_t kLine = 64;
// Setup messages are a segment name or a one-line reason.
constexpr std::uint32_t kMaxSetupMessage = 1024;

std::size_t round_up(std::size_t n) { return (n + kLine - 1) / kLine * kLine; }

std::size_t wake_offset() { return kLine; }
std::size_t index_offset(int locals) {
  return wake_offset() + kLine * static_cast<std::size_t>(locals);
}
std::size_t pairs(int locals) {
  return static_cast<std::size_t>(locals) * static_cast<std::size_t>(locals - 1);
}
std::size_t data_offset(int locals) {
  return round_up(index_offset(locals) + sizeof(RingIndex) * pairs(locals));
}

std::string os_error(const char* what, int err) {
  return fmt::format("{}: {}", what, net::errno_name(err));
}

// Creates, sizes and maps a new segment; returns its name, or throws a reason (a string).
struct Created {
  std::string name;
  void* base = nullptr;
  std::size_t bytes = 0;
};

Created create_segment(std::size_t bytes) {
  std::array<std::uint8_t, 12> nonce{};
  net::random_bytes(nonce);
  Created c;
  c.name = fmt::format("/chorus-{}-{}", ::getpid(), net::to_hex(nonce));
  const int fd = ::shm_open(c.name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw std::string(os_error("shm_open", errno));
  }
  // posix_fallocate reserves the pages now: a full /dev/shm fails here with ENOSPC instead of
  // killing a rank with SIGBUS at its first write into the rings.
  int err = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (err == 0) {
    err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  }
  void* base = MAP_FAILED;
  if (err == 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      err = errno;
    }
  }
  ::close(fd);
  if (err != 0) {
    ::shm_unlink(c.name.c_str());
    throw std::string(
        os_error(base == MAP_FAILED && err != ENOSPC ? "reserving /dev/shm" : "mmap", err) +
        fmt::format(" ({} for the rings)", format_bytes(bytes)));
  }
  c.base = base;
  c.bytes = bytes;
  return c;
}

void* open_segment(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    throw std::string(os_error("shm_open of the host's segment", errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(fd);
    throw std::string(fmt::format("the host's segment {} has the wrong size", name));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    throw std::string(os_error("mmap of the host's segment", err));
  }
  return base;
}

// The setup messages: a 4-byte little-endian length, then the text.
void send_message(Mesh& mesh, int peer, const std::string& text, Deadline deadline,
                  const std::string& where) {
  std::vector<std::uint8_t> buf(4 + text.size());
  const auto n = static_cast<std::uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) {
    buf[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  }
  std::memcpy(buf.data() + 4, text.data(), text.size());
  PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
  const net::IoResult r = net::send_all(link.control, buf.data(), buf.size(), deadline);
  if (!r.ok()) {
    const std::string msg = fmt::format("{}: sending to rank {} ({}) failed: {}", where, peer,
                                        link.address, r.describe());
    if (r.timed_out()) {
      throw TimeoutError(msg, ErrorContext{.peers = {peer}});
    }
    throw NetworkError(msg, ErrorContext{.peers = {peer}});
  }
}

std::string recv_message(Mesh& mesh, int peer, Deadline deadline, const std::string& where) {
  PeerLink& link = mesh.peers[static_cast<std::size_t>(peer)];
  auto fail = [&](const net::IoResult& r) {
    const std::string msg = fmt::format(
        "{}: rank {} ({}) did not answer the shared-memory setup: {}", where, peer, link.address,
        r.closed() ? "it closed the connection (it exited or failed; check that rank's log)"
                   : r.describe());
    if (r.timed_out()) {
      throw TimeoutError(msg, ErrorContext{.peers = {peer}});
    }
    throw NetworkError(msg, ErrorContext{.peers = {peer}});
  };
  std::array<std::uint8_t, 4> len{};
  net::IoResult r = net::recv_exact(link.control, len.data(), len.size(), deadline);
  if (!r.ok()) {
    fail(r);
  }
  const std::uint32_t n =
      len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<std::uint32_t>(len[3]) << 24);
  if (n > kMaxSetupMessage) {
    throw NetworkError(fmt::format("{}: rank {} ({}) sent a {}-byte shared-memory setup message "
                                   "(at most {}): not a chorus rank of this version",
                                   where, peer, link.address, n, kMaxSetupMessage),
                       ErrorContext{.peers = {peer}});
  }
  std::string text(n, '\0');
  r = net::recv_exact(link.control, text.data(), n, deadline);
  if (!r.ok()) {
    fail(r);
  }
  return text;
}

// After the segment is set up: the host's lowest rank and each other rank read each other's
// probe word (peer_memory.hpp), and the lowest rank sends everyone one verdict, so that all
// host ranks choose the same algorithms. Returns "" or why the memory cannot be reached. (Ranks
// other than the lowest do not test each other: the kernel's rules do not tell siblings apart.)
std::string agree_on_peer_memory(Mesh& mesh, int rank, const std::vector<int>& locals,
                                 Deadline deadline, const std::string& where) {
  std::uint64_t word = 0;  // read by the peers until the verdict is out
  const std::string mine = encode_probe(publish_probe(word));
  const int leader = locals.front();
  if (rank == leader) {
    for (int peer : locals) {
      if (peer != rank) {
        send_message(mesh, peer, mine, deadline, where);
      }
    }
    std::string verdict;
    for (int peer : locals) {
      if (peer == rank) {
        continue;
      }
      // "<its probe>\n<its check of ours: empty, or why it failed>"
      const std::string answer = recv_message(mesh, peer, deadline, where);
      const std::size_t nl = answer.find('\n');
      MemoryProbe theirs;
      std::string why;
      if (nl == std::string::npos || !decode_probe(answer.substr(0, nl), theirs)) {
        why = fmt::format("rank {} sent no memory probe", peer);
      } else if (nl + 1 < answer.size()) {
        why = fmt::format("rank {} reading rank {}: {}", peer, rank, answer.substr(nl + 1));
      } else if (std::string err = check_probe(theirs); !err.empty()) {
        why = fmt::format("rank {} reading rank {}: {}", rank, peer, err);
      }
      if (verdict.empty()) {
        verdict = why;
      }
    }
    for (int peer : locals) {
      if (peer != rank) {
        send_message(mesh, peer, verdict, deadline, where);
      }
    }
    return verdict;
  }
  MemoryProbe theirs;
  std::string check = "sent no memory probe";
  if (decode_probe(recv_message(mesh, leader, deadline, where), theirs)) {
    check = check_probe(theirs);
  }
  send_message(mesh, leader, mine + "\n" + check, deadline, where);
  return recv_message(mesh, leader, deadline, where);
}

}  // namespace

ShmSegment::ShmSegment(void* base, std::size_t bytes, int locals, std::size_t ring_bytes) noexcept
    : base_(static_cast<std::byte*>(base)),
      bytes_(bytes),
      locals_(locals),
      ring_bytes_(ring_bytes) {}

ShmSegment::~ShmSegment() { ::munmap(base_, bytes_); }

std::size_t ShmSegment::size_for(int locals, std::size_t ring_bytes, bool board) noexcept {
  return data_offset(locals) + ring_bytes * pairs(locals) +
         (board ? SlotBoard::bytes_for(locals) : 0);
}

std::size_t ShmSegment::pair_index(int from, int to) const noexcept {
  return static_cast<std::size_t>(from) * static_cast<std::size_t>(locals_ - 1) +
         static_cast<std::size_t>(to < from ? to : to - 1);
}

WakeWord& ShmSegment::wake(int local) const noexcept {
  return *std::launder(
      reinterpret_cast<WakeWord*>(base_ + wake_offset() + kLine * static_cast<std::size_t>(local)));
}

RingIndex& ShmSegment::ring(int from, int to) const noexcept {
  return *std::launder(reinterpret_cast<RingIndex*>(base_ + index_offset(locals_) +
                                                    sizeof(RingIndex) * pair_index(from, to)));
}

std::byte* ShmSegment::ring_data(int from, int to) const noexcept {
  return base_ + data_offset(locals_) + ring_bytes_ * pair_index(from, to);
}

void wake_if_sleeping(WakeWord& w) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w.sleeping.load(std::memory_order_relaxed) != 0) {
    w.seq.fetch_add(1, std::memory_order_release);
    futex_wake(w.seq);
  }
}

std::byte* ShmSegment::board() const noexcept {
  return base_ + data_offset(locals_) + ring_bytes_ * pairs(locals_);
}

std::size_t default_ring_bytes(int locals) noexcept {
  return locals <= 4 ? (1u << 20) : (512u << 10);
}

std::unique_ptr<ShmSegment> attach_host_segment(Mesh& mesh, int rank,
                                                const std::vector<int>& locals, Deadline deadline,
                                                bool whole_group, std::string& why_not) {
  const int n = static_cast<int>(locals.size());
  const std::size_t ring_bytes = default_ring_bytes(n);
  const std::size_t bytes = ShmSegment::size_for(n, ring_bytes, whole_group);
  const std::string where =
      fmt::format("shared-memory setup on rank {} (host ranks {})", rank, format_ranks(locals));
  const int leader = locals.front();
  if (rank == leader) {
    Created c;
    std::string failure;
    try {
      c = create_segment(bytes);
    } catch (const std::string& reason) {
      failure = fmt::format("rank {}: {}", rank, reason);
    }
    std::unique_ptr<ShmSegment> segment;
    if (failure.empty()) {
      segment = std::make_unique<ShmSegment>(c.base, c.bytes, n, ring_bytes);
    }
    // Whatever happens from here on (a follower that died, a timeout), the name goes.
    struct Unlink {
      const std::string& name;
      ~Unlink() {
        if (!name.empty()) {
          ::shm_unlink(name.c_str());
        }
      }
    } unlink_at_exit{c.name};
    // The name goes out only over the verified control sockets; "!" marks a failure.
    for (int peer : locals) {
      if (peer != rank) {
        send_message(mesh, peer, failure.empty() ? c.name : "!" + failure, deadline, where);
      }
    }
    if (!failure.empty()) {
      why_not = failure;
      return nullptr;
    }
    std::string verdict;
    for (int peer : locals) {
      if (peer != rank) {
        std::string answer = recv_message(mesh, peer, deadline, where);
        if (!answer.empty() && verdict.empty()) {
          verdict = fmt::format("rank {}: {}", peer, answer);
        }
      }
    }
    // Everyone has it mapped (or gave up): from now on it has no name to leak.
    ::shm_unlink(c.name.c_str());
    c.name.clear();
    for (int peer : locals) {
      if (peer != rank) {
        send_message(mesh, peer, verdict, deadline, where);
      }
    }
    if (!verdict.empty()) {
      why_not = verdict;
      return nullptr;
    }
    if (whole_group) {
      segment->set_peer_memory_why_not(agree_on_peer_memory(mesh, rank, locals, deadline, where));
    }
    return segment;
  }
  const std::string name = recv_message(mesh, leader, deadline, where);
  if (!name.empty() && name[0] == '!') {
    why_not = name.substr(1);
    return nullptr;
  }
  std::unique_ptr<ShmSegment> segment;
  std::string answer;
  try {
    if (name.rfind("/chorus-", 0) != 0 || name.find('/', 1) != std::string::npos) {
      throw std::string(fmt::format("rank {} named no chorus segment ('{}')", leader, name));
    }
    segment = std::make_unique<ShmSegment>(open_segment(name, bytes), bytes, n, ring_bytes);
  } catch (const std::string& reason) {
    answer = reason;
  }
  try {
    send_message(mesh, leader, answer, deadline, where);
    const std::string verdict = recv_message(mesh, leader, deadline, where);
    if (!verdict.empty()) {
      why_not = verdict;
      return nullptr;
    }
  } catch (const Error&) {
    // The leader is gone (or hung) before it could unlink the name: the group fails, and no
    // file is left behind either way.
    if (name.rfind("/chorus-", 0) == 0) {
      ::shm_unlink(name.c_str());
    }
    throw;
  }
  if (whole_group) {
    segment->set_peer_memory_why_not(agree_on_peer_memory(mesh, rank, locals, deadline, where));
  }
  return segment;
}

}  // namespace chorus::cpu
