// SPDX-License-Identifier: BSD-3-Clause
// SharedBuffer: a sealed memfd mapped MAP_SHARED, listed in a process-wide registry so that a
// collective can tell its peers where to map it (core/shared_regions.hpp).
#include <chorus/shared_buffer.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/shared_regions.hpp"

namespace chorus {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::uint64_t, SharedRegion> by_base;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: buffers may outlive static teardown
  return *r;
}

[[noreturn]] void fail(const char* call, std::size_t bytes, int err) {
  const char* next = err == EMFILE || err == ENFILE
                         ? "; each SharedBuffer holds a file descriptor: raise the limit "
                           "(ulimit -n) or free buffers"
                         : "; free memory, allocate less, or use ordinary memory (the collectives "
                           "then copy through shared rings)";
  throw BackendError(fmt::format("SharedBuffer of {} bytes: {} failed: {}{}", bytes, call,
                                 std::strerror(err), next));
}

}  // namespace

std::optional<SharedRegion> find_shared_region(const void* data, std::size_t bytes) noexcept {
  const auto p = reinterpret_cast<std::uintptr_t>(data);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_base.upper_bound(p);
  if (data == nullptr || it == r.by_base.begin()) {
    return std::nullopt;
  }
  const SharedRegion& region = (--it)->second;
  const std::uint64_t offset = p - region.base;
  if (offset >= region.bytes || bytes > region.bytes - offset) {
    return std::nullopt;
  }
  return region;
}

bool in_shared_buffer(const void* data, std::size_t bytes) noexcept {
  return find_shared_region(data, bytes).has_value();
}

SharedBuffer::SharedBuffer(std::size_t bytes) {
  if (bytes == 0) {
    return;
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) {
    fail("rounding to pages", bytes, ENOMEM);
  }
  const std::size_t mapped = (bytes + page - 1) / page * page;
  // More than the machine has is a mistake (a size in elements passed as bytes, say); reserving
  // it page by page would first push everything else out of memory.
  const auto physical = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES));
  if (mapped / page > physical) {
    throw BackendError(
        fmt::format("SharedBuffer of {} bytes: this machine has {} bytes of memory; allocate less",
                    bytes, physical * page));
  }
  const int fd = ::memfd_create("chorus-shared-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    fail("memfd_create", bytes, errno);
  }
  auto close_and_fail = [&](const char* call, int err) {
    ::close(fd);
    fail(call, bytes, err);
  };
  if (::ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    close_and_fail("ftruncate", errno);
  }
  // Reserve the pages now: a full machine fails here, not with SIGBUS at first touch.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(mapped)); err != 0) {
    close_and_fail("posix_fallocate", err);
  }
  // Peers map the file read-write; the seals keep any of them from resizing it under us.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close_and_fail("fcntl(F_ADD_SEALS)", errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    close_and_fail("fstat", errno);
  }
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    close_and_fail("mmap", errno);
  }
  SharedRegion region;
  region.base = reinterpret_cast<std::uintptr_t>(p);
  region.bytes = mapped;
  region.inode = st.st_ino;
  region.fd = fd;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.by_base[region.base] = region;
  }
  data_ = p;
  size_ = bytes;
}

SharedBuffer::~SharedBuffer() { release(); }

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void SharedBuffer::release() noexcept {
  if (data_ == nullptr) {
    return;
  }
  SharedRegion region;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.by_base.find(reinterpret_cast<std::uintptr_t>(data_));
    region = it->second;
    r.by_base.erase(it);
  }
  ::munmap(data_, region.bytes);
  ::close(region.fd);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace chorus
