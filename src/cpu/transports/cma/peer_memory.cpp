// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/cma/peer_memory.hpp"

#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "net/socket.hpp"

namespace chorus::cpu {
namespace {

std::string describe(const char* call, std::int64_t pid, int err) {
  const char* why = "";
  switch (err) {
    case ESRCH:
      why = ": the process has exited";
      break;
    case EFAULT:
      why = ": the address is not mapped in one of the two processes";
      break;
    case EPERM:
      why =
          ": the kernel refuses (another user, or a policy such as "
          "/proc/sys/kernel/yama/ptrace_scope >= 1 or a container's seccomp filter)";
      break;
    case ENOSYS:
      why = ": the system call is not available here";
      break;
    default:
      break;
  }
  return fmt::format("{} on process {} failed: {}{}", call, pid, net::errno_name(err), why);
}

// Moves `bytes` between local and remote memory, continuing after partial transfers (the
// kernel stops at a page it cannot reach, or early under memory pressure).
template <typename Call>
std::string transfer(const char* name, std::int64_t pid, std::byte* local, std::uint64_t remote,
                     std::size_t bytes, Call call) {
  std::size_t done = 0;
  while (done < bytes) {
    iovec l{local + done, bytes - done};
    iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), bytes - done};
    const ssize_t n = call(static_cast<pid_t>(pid), &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return describe(name, pid, errno);
    }
    if (n == 0) {
      return describe(name, pid, EFAULT);
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

std::string read_peer_memory(std::int64_t pid, void* to, std::uint64_t from, std::size_t bytes) {
  return transfer("process_vm_readv", pid, static_cast<std::byte*>(to), from, bytes,
                  ::process_vm_readv);
}

std::string write_peer_memory(std::int64_t pid, std::uint64_t to, const void* from,
                              std::size_t bytes) {
  // process_vm_writev only reads the local iovec; its type is not const.
  return transfer("process_vm_writev", pid,
                  const_cast<std::byte*>(static_cast<const std::byte*>(from)), to, bytes,
                  ::process_vm_writev);
}

MemoryProbe publish_probe(std::uint64_t& word) {
  std::random_device rd;
  word = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;  // never 0: a blank word fails
  return {static_cast<std::int64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(&word), word};
}

std::string encode_probe(const MemoryProbe& p) {
  return fmt::format("{} {:x} {:x}", p.pid, p.address, p.value);
}

bool decode_probe(const std::string& text, MemoryProbe& out) {
  long long pid = 0;
  unsigned long long address = 0;
  unsigned long long value = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%lld %llx %llx%n", &pid, &address, &value, &used) != 3 ||
      static_cast<std::size_t>(used) != text.size() || pid <= 0) {
    return false;
  }
  out = {pid, address, value};
  return true;
}

std::string check_probe(const MemoryProbe& p) {
  std::uint64_t seen = 0;
  std::string err = read_peer_memory(p.pid, &seen, p.address, sizeof seen);
  if (err.empty() && seen != p.value) {
    err = fmt::format(
        "process {} here is not the peer (a probe word read back wrong): the ranks run in "
        "different pid namespaces",
        p.pid);
  }
  return err;
}

}  // namespace chorus::cpu
