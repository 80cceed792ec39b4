// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/cma/peer_buffers.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "net/socket.hpp"

namespace chorus::cpu {

PeerMapping::~PeerMapping() { ::munmap(at_, bytes_); }

std::shared_ptr<PeerMapping> PeerBuffers::map(std::int64_t pid, const SharedRegion& region,
                                              std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++uses_;
  for (Entry& e : entries_) {
    if (e.pid == pid && e.inode == region.inode && e.bytes == region.bytes) {
      e.last_use = uses_;
      return e.mapping;
    }
  }
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, region.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    why = fmt::format("opening {} failed: {}", path, net::errno_name(errno));
    return nullptr;
  }
  struct stat st {};
  const bool same = ::fstat(fd, &st) == 0 && st.st_ino == region.inode &&
                    static_cast<std::uint64_t>(st.st_size) >= region.bytes;
  void* p =
      same ? ::mmap(nullptr, region.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
           : MAP_FAILED;
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (!same) {
    why = fmt::format("{} is not the buffer the peer described (another file, or smaller)", path);
    return nullptr;
  }
  if (p == MAP_FAILED) {
    why = fmt::format("mapping {} ({} bytes) failed: {}", path, region.bytes, net::errno_name(err));
    return nullptr;
  }
  auto mapping = std::make_shared<PeerMapping>(static_cast<std::byte*>(p), region.bytes);
  // Keep at most kPerPeer of this peer's mappings: drop the least recently used.
  std::vector<Entry*> of_peer;
  for (Entry& e : entries_) {
    if (e.pid == pid) {
      of_peer.push_back(&e);
    }
  }
  if (of_peer.size() >= kPerPeer) {
    Entry* oldest = *std::min_element(of_peer.begin(), of_peer.end(),
                                      [](Entry* a, Entry* b) { return a->last_use < b->last_use; });
    std::swap(*oldest, entries_.back());
    entries_.pop_back();
  }
  entries_.push_back({pid, region.inode, region.bytes, uses_, mapping});
  return mapping;
}

std::size_t PeerBuffers::kept() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace chorus::cpu
