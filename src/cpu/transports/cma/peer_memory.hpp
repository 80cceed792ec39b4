// SPDX-License-Identifier: BSD-3-Clause
// Reading and writing another process's memory on this host (process_vm_readv/writev): the
// kernel copies straight between the two address spaces, one copy instead of the two that a
// shared ring costs (into the ring, out of it). The kernel allows it between processes of one
// user unless a security policy forbids it (Yama's ptrace_scope >= 1 for non-descendants,
// seccomp in some containers), so a group tests it once at setup (the probes below, from
// shm_segment.cpp) and uses the algorithms built on it only where every test passed.
//
// A peer's address space is named by its pid. A pid is only trusted after a probe read found
// the random word the peer published at the address it gave: a rank in another pid namespace
// (a container that shares the host id) fails the probe instead of reading a stranger.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::cpu {

// Copies `bytes` from address `from` in process `pid` to `to`. Returns "" or what failed
// (the peer exited, the address is not mapped there, the kernel refuses).
std::string read_peer_memory(std::int64_t pid, void* to, std::uint64_t from, std::size_t bytes);
// Copies `bytes` from `from` to address `to` in process `pid`. Returns "" or what failed.
std::string write_peer_memory(std::int64_t pid, std::uint64_t to, const void* from,
                              std::size_t bytes);

// What a rank publishes so that its peers can test that they reach its memory: its pid and
// the address of a word holding a random value. The word must outlive the peers' probes.
struct MemoryProbe {
  std::int64_t pid = 0;
  std::uint64_t address = 0;
  std::uint64_t value = 0;
};
// Fills `word` with a random value and describes it.
MemoryProbe publish_probe(std::uint64_t& word);
std::string encode_probe(const MemoryProbe& p);
// false if `text` is not what encode_probe() writes.
bool decode_probe(const std::string& text, MemoryProbe& out);
// Reads the peer's word through process_vm_readv. Returns "" if it holds the value, else why
// not (refused, or another process: the pid names someone else here).
std::string check_probe(const MemoryProbe& p);

}  // namespace chorus::cpu
