// SPDX-License-Identifier: BSD-3-Clause
// peer_memory: reads and writes through process_vm_readv/writev, and the setup probe that
// decides whether a host's ranks may use them.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tcp/peer_memory.hpp"

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
  REQUIRE(tcp::read_peer_memory(me, dst.data() + 1, address_of(src.data()), src.size()) == "");
  CHECK(std::equal(src.begin(), src.end(), dst.begin() + 1));
  CHECK(dst.front() == 0xee);
  CHECK(dst.back() == 0xee);

  std::vector<std::uint8_t> back(src.size(), 0);
  REQUIRE(tcp::write_peer_memory(me, address_of(back.data()), src.data(), src.size()) == "");
  CHECK(back == src);
}

TEST_CASE("peer memory: a failure says what happened", "[tcp][peer_memory]") {
  std::uint64_t word = 0;
  const std::string gone = tcp::read_peer_memory(reaped_pid(), &word, address_of(&word), 8);
  CHECK(gone.find("ESRCH") != std::string::npos);
  CHECK(gone.find("has exited") != std::string::npos);
  // Address 8 is never mapped.
  const std::string unmapped = tcp::read_peer_memory(::getpid(), &word, 8, 8);
  CHECK(unmapped.find("not mapped") != std::string::npos);
}

TEST_CASE("peer memory probe: passes for the publisher, fails for anyone else",
          "[tcp][peer_memory]") {
  std::uint64_t word = 0;
  const tcp::MemoryProbe probe = tcp::publish_probe(word);
  CHECK(word != 0);
  tcp::MemoryProbe decoded;
  REQUIRE(tcp::decode_probe(tcp::encode_probe(probe), decoded));
  CHECK(decoded.pid == probe.pid);
  CHECK(decoded.address == probe.address);
  CHECK(decoded.value == probe.value);
  CHECK(tcp::check_probe(decoded) == "");

  // The word at that address holds something else: another process behind the same pid.
  tcp::MemoryProbe stranger = decoded;
  stranger.value ^= 1;
  CHECK(tcp::check_probe(stranger).find("pid namespaces") != std::string::npos);
  stranger = decoded;
  stranger.pid = reaped_pid();
  CHECK(tcp::check_probe(stranger).find("has exited") != std::string::npos);

  for (const char* bad : {"", "12", "12 ab", "12 ab cd ef", "-3 ab cd", "x 1 2", "12 ab cd "}) {
    INFO(bad);
    CHECK_FALSE(tcp::decode_probe(bad, decoded));
  }
}

}  // namespace chorus::test
