// SPDX-License-Identifier: BSD-3-Clause
// peer_memory: reads and writes through process_vm_readv/writev, the setup probe that
// decides whether a host's ranks may use them, PeerBuffers (mappings of SharedBuffers), and
// CmaOneSided, the transport capability built on them (transport.hpp, OneSided).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <chorus/shared_buffer.hpp>

#include "core/shared_regions.hpp"
#include "cpu/transports/cma/cma_one_sided.hpp"
#include "cpu/transports/cma/peer_buffers.hpp"
#include "cpu/transports/cma/peer_memory.hpp"

namespace chorus::test {
namespace {

std::uint64_t address_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// A pid that names no process: a child that has exited and been reaped.
pid_t reaped_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("peer memory: reads and writes move exactly the bytes asked for", "[tcp][peer_memory]") {
  // Several pages, at an odd offset: the kernel moves them in more than one piece.
  std::vector<std::uint8_t> src(3 * 4096 + 123);
  std::iota(src.begin(), src.end(), std::uint8_t{7});
  std::vector<std::uint8_t> dst(src.size() + 2, 0xee);
  const std::int64_t me = ::getpid();
  REQUIRE(cpu::read_peer_memory(me, dst.data() + 1, address_of(src.data()), src.size()) == "");
  CHECK(std::equal(src.begin(), src.end(), dst.begin() + 1));
  CHECK(dst.front() == 0xee);
  CHECK(dst.back() == 0xee);

  std::vector<std::uint8_t> back(src.size(), 0);
  REQUIRE(cpu::write_peer_memory(me, address_of(back.data()), src.data(), src.size()) == "");
  CHECK(back == src);
}

TEST_CASE("peer memory: a failure says what happened", "[tcp][peer_memory]") {
  std::uint64_t word = 0;
  const std::string gone = cpu::read_peer_memory(reaped_pid(), &word, address_of(&word), 8);
  CHECK(gone.find("ESRCH") != std::string::npos);
  CHECK(gone.find("has exited") != std::string::npos);
  // Address 8 is never mapped.
  const std::string unmapped = cpu::read_peer_memory(::getpid(), &word, 8, 8);
  CHECK(unmapped.find("not mapped") != std::string::npos);
}

TEST_CASE("peer memory probe: passes for the publisher, fails for anyone else",
          "[tcp][peer_memory]") {
  std::uint64_t word = 0;
  const cpu::MemoryProbe probe = cpu::publish_probe(word);
  CHECK(word != 0);
  cpu::MemoryProbe decoded;
  REQUIRE(cpu::decode_probe(cpu::encode_probe(probe), decoded));
  CHECK(decoded.pid == probe.pid);
  CHECK(decoded.address == probe.address);
  CHECK(decoded.value == probe.value);
  CHECK(cpu::check_probe(decoded) == "");

  // The word at that address holds something else: another process behind the same pid.
  cpu::MemoryProbe stranger = decoded;
  stranger.value ^= 1;
  CHECK(cpu::check_probe(stranger).find("pid namespaces") != std::string::npos);
  stranger = decoded;
  stranger.pid = reaped_pid();
  CHECK(cpu::check_probe(stranger).find("has exited") != std::string::npos);

  for (const char* bad : {"", "12", "12 ab", "12 ab cd ef", "-3 ab cd", "x 1 2", "12 ab cd "}) {
    INFO(bad);
    CHECK_FALSE(cpu::decode_probe(bad, decoded));
  }
}

// ---- PeerBuffers: another process's SharedBuffers mapped here ----
// The "peer" is this process itself: /proc/<own pid>/fd/N goes through the same kernel checks.

TEST_CASE("peer buffers: a SharedBuffer mapped through /proc is the same memory",
          "[tcp][peer_memory]") {
  SharedBuffer b(3 * 4096 + 5);
  auto* mine = static_cast<std::uint8_t*>(b.data());
  std::iota(mine, mine + b.size(), std::uint8_t{1});
  const auto region = find_shared_region(mine, b.size());
  REQUIRE(region);
  cpu::PeerBuffers peers;
  std::string why;
  auto m = peers.map(::getpid(), *region, why);
  INFO(why);
  REQUIRE(m != nullptr);
  std::byte* there = m->at(region->base, region->base + 100);
  CHECK(there != reinterpret_cast<std::byte*>(mine + 100));  // a mapping of its own
  CHECK(std::to_integer<std::uint8_t>(*there) == mine[100]);
  *there = std::byte{0xab};  // writes reach the owner
  CHECK(mine[100] == 0xab);
  // The next op finds the kept mapping.
  CHECK(peers.map(::getpid(), *region, why) == m);
  CHECK(peers.kept() == 1);
}

TEST_CASE("peer buffers: an fd that names another file, or no file, is refused with a reason",
          "[tcp][peer_memory]") {
  SharedBuffer b(4096);
  SharedBuffer other(4096);
  auto region = *find_shared_region(b.data(), 1);
  cpu::PeerBuffers peers;
  std::string why;
  SharedRegion wrong = region;
  wrong.fd = find_shared_region(other.data(), 1)->fd;  // a live memfd, but not this buffer
  CHECK(peers.map(::getpid(), wrong, why) == nullptr);
  CHECK(why.find("is not the buffer the peer described") != std::string::npos);
  SharedRegion larger = region;
  larger.bytes = 2 * 4096;  // more than the file holds
  CHECK(peers.map(::getpid(), larger, why) == nullptr);
  CHECK(why.find("is not the buffer the peer described") != std::string::npos);
  SharedRegion closed = region;
  closed.fd = 1 << 20;
  CHECK(peers.map(::getpid(), closed, why) == nullptr);
  CHECK(why.find("opening /proc/") != std::string::npos);
  CHECK(peers.map(reaped_pid(), region, why) == nullptr);
  CHECK(why.find("opening /proc/") != std::string::npos);
  CHECK(peers.kept() == 0);
}

TEST_CASE("peer buffers: a few mappings are kept per peer, the least recently used dropped",
          "[tcp][peer_memory]") {
  std::vector<SharedBuffer> buffers;
  std::vector<SharedRegion> regions;
  for (std::size_t i = 0; i < cpu::PeerBuffers::kPerPeer + 2; ++i) {
    buffers.emplace_back(4096);
    regions.push_back(*find_shared_region(buffers.back().data(), 1));
  }
  cpu::PeerBuffers peers;
  std::string why;
  const auto first = peers.map(::getpid(), regions[0], why);
  for (std::size_t i = 1; i < regions.size(); ++i) {
    REQUIRE(peers.map(::getpid(), regions[i], why) != nullptr);
    if (i == 3) {
      REQUIRE(peers.map(::getpid(), regions[0], why) == first);  // used again: kept
    }
  }
  CHECK(peers.kept() == cpu::PeerBuffers::kPerPeer);
  CHECK(peers.map(::getpid(), regions[0], why) == first);  // still kept
  // A dropped mapping stays valid for whoever still holds it.
  auto* p = static_cast<std::uint8_t*>(buffers[0].data());
  p[7] = 42;
  CHECK(std::to_integer<std::uint8_t>(*first->at(regions[0].base, regions[0].base + 7)) == 42);
}

// ---- CmaOneSided: the one-sided capability (keys, read, write, map) ----
// The "peer" is this process itself, as above, except where it must have exited.

TEST_CASE("cma one-sided: a key reads and writes the registered memory, in bounds only",
          "[tcp][peer_memory]") {
  cpu::CmaOneSided os;
  std::vector<std::uint8_t> mine(2 * 4096 + 77);
  std::iota(mine.begin(), mine.end(), std::uint8_t{3});
  const cpu::MemoryKey key = os.register_buffer(mine.data(), mine.size());
  CHECK_FALSE(os.mappable(key));  // ordinary memory
  std::string why;
  CHECK(os.map(1, key, why).at == nullptr);
  CHECK(why.find("rank 1's buffer is not in a SharedBuffer") != std::string::npos);

  std::vector<std::uint8_t> got(4096 + 9);
  REQUIRE(os.post_read(1, key, 33, got.data(), got.size(), 7).ok());
  CHECK(std::equal(got.begin(), got.end(), mine.begin() + 33));
  const std::vector<std::uint8_t> put(100, 0xcd);
  REQUIRE(os.post_write(1, key, mine.size() - put.size(), put.data(), put.size(), 8).ok());
  CHECK(mine.back() == 0xcd);
  CHECK(mine[mine.size() - put.size() - 1] != 0xcd);

  // A transfer past the registered bytes is refused before any system call.
  const cpu::OneSidedResult past = os.post_read(2, key, mine.size() - 10, got.data(), 11, 9);
  CHECK_FALSE(past.ok());
  CHECK_FALSE(past.pending);
  CHECK(past.error.find("outside the") != std::string::npos);
  CHECK(past.error.find("rank 2") != std::string::npos);
}

TEST_CASE("cma one-sided: a SharedBuffer's key maps the same memory, held while in use",
          "[tcp][peer_memory]") {
  cpu::CmaOneSided os;
  SharedBuffer b(3 * 4096);
  auto* mine = static_cast<std::uint8_t*>(b.data());
  std::iota(mine, mine + b.size(), std::uint8_t{1});
  // Part of the buffer, at an offset: the mapping points at the registered address.
  const cpu::MemoryKey key = os.register_buffer(mine + 4096, 4096);
  REQUIRE(os.mappable(key));
  std::string why;
  cpu::PeerView v = os.map(1, key, why);
  INFO(why);
  REQUIRE(v.at != nullptr);
  CHECK(v.at != reinterpret_cast<std::byte*>(mine + 4096));  // a mapping of its own
  CHECK(std::to_integer<std::uint8_t>(v.at[5]) == mine[4096 + 5]);
  v.at[6] = std::byte{0xee};
  CHECK(mine[4096 + 6] == 0xee);
  CHECK(os.kept_mappings() == 1);
  // Reads and writes through the key work on it too (a peer that could not map it).
  std::uint8_t word = 0;
  REQUIRE(os.post_read(1, key, 6, &word, 1, 0).ok());
  CHECK(word == 0xee);
  // Memory that only starts in a SharedBuffer is not mappable.
  CHECK_FALSE(os.mappable(os.register_buffer(mine + 2 * 4096, 2 * 4096)));
  CHECK_FALSE(os.mappable(cpu::MemoryKey{}));  // nothing registered
}

TEST_CASE("cma one-sided: a peer that exited fails the transfer, naming the rank",
          "[tcp][peer_memory]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    cpu::CmaOneSided os;
    static std::uint64_t word = 42;
    const cpu::MemoryKey key = os.register_buffer(&word, sizeof word);
    const bool sent = ::write(fds[1], key.bytes.data(), key.bytes.size()) ==
                      static_cast<ssize_t>(key.bytes.size());
    ::_exit(sent ? 0 : 1);
  }
  cpu::MemoryKey key;
  REQUIRE(::read(fds[0], key.bytes.data(), key.bytes.size()) ==
          static_cast<ssize_t>(key.bytes.size()));
  ::close(fds[0]);
  ::close(fds[1]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  cpu::CmaOneSided os;
  std::uint64_t got = 0;
  const cpu::OneSidedResult r = os.post_read(3, key, 0, &got, sizeof got, 0);
  CHECK_FALSE(r.ok());
  INFO(r.error);
  CHECK(r.error.find("reading rank 3's memory failed") != std::string::npos);
  CHECK(r.error.find("the process has exited") != std::string::npos);
  const cpu::OneSidedResult w = os.post_write(3, key, 0, &got, sizeof got, 0);
  CHECK(w.error.find("writing into rank 3's memory failed") != std::string::npos);
}

}  // namespace chorus::test
