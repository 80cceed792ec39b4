// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/transports/cma/cma_one_sided.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "core/shared_regions.hpp"
#include "cpu/transports/cma/peer_memory.hpp"

namespace chorus::cpu {
namespace {

// A key's layout (little-endian): pid, address, length, memfd number (-1: not in a
// SharedBuffer), 4 zero bytes, the SharedBuffer's inode, base and length, 8 zero bytes.
struct Fields {
  std::int64_t pid = 0;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  SharedRegion region;
};

MemoryKey encode(const Fields& f) {
  MemoryKey k;
  std::uint8_t* b = k.bytes.data();
  put_le(b, static_cast<std::uint64_t>(f.pid), 8);
  put_le(b + 8, f.address, 8);
  put_le(b + 16, f.bytes, 8);
  put_le(b + 24, static_cast<std::uint32_t>(f.region.fd), 4);
  put_le(b + 32, f.region.inode, 8);
  put_le(b + 40, f.region.base, 8);
  put_le(b + 48, f.region.bytes, 8);
  return k;
}

Fields decode(const MemoryKey& k) {
  const std::uint8_t* b = k.bytes.data();
  Fields f;
  f.pid = static_cast<std::int64_t>(get_le(b, 8));
  f.address = get_le(b + 8, 8);
  f.bytes = get_le(b + 16, 8);
  f.region.fd = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(b + 24, 4)));
  f.region.inode = get_le(b + 32, 8);
  f.region.base = get_le(b + 40, 8);
  f.region.bytes = get_le(b + 48, 8);
  return f;
}

// The registered memory lies wholly in the SharedBuffer the key names.
bool in_region(const Fields& f) noexcept {
  const SharedRegion& r = f.region;
  return r.fd >= 0 && f.bytes > 0 && f.address >= r.base && f.address - r.base <= r.bytes &&
         f.bytes <= r.bytes - (f.address - r.base);
}

// A transfer must stay inside the registered memory: a key is a promise about that much.
std::string out_of_bounds(int peer, const Fields& f, std::size_t offset, std::size_t bytes) {
  if (offset <= f.bytes && bytes <= f.bytes - offset) {
    return {};
  }
  return fmt::format("bytes {}..{} are outside the {} bytes rank {} registered", offset,
                     offset + bytes, f.bytes, peer);
}

}  // namespace

CmaOneSided::CmaOneSided() : pid_(static_cast<std::int64_t>(::getpid())) {}

MemoryKey CmaOneSided::register_buffer(const void* data, std::size_t bytes) const {
  Fields f;
  f.pid = pid_;
  f.address = reinterpret_cast<std::uintptr_t>(data);
  f.bytes = bytes;
  if (bytes > 0) {
    f.region = find_shared_region(data, bytes).value_or(SharedRegion{});
  }
  return encode(f);
}

bool CmaOneSided::mappable(const MemoryKey& key) const noexcept { return in_region(decode(key)); }

OneSidedResult CmaOneSided::post_read(int peer, const MemoryKey& key, std::size_t offset, void* dst,
                                      std::size_t bytes, std::uint64_t) {
  const Fields f = decode(key);
  OneSidedResult r;
  r.error = out_of_bounds(peer, f, offset, bytes);
  if (r.error.empty()) {
    r.error = read_peer_memory(f.pid, dst, f.address + offset, bytes);
  }
  if (!r.error.empty()) {
    r.error = fmt::format("reading rank {}'s memory failed: {}", peer, r.error);
  }
  return r;
}

OneSidedResult CmaOneSided::post_write(int peer, const MemoryKey& key, std::size_t offset,
                                       const void* src, std::size_t bytes, std::uint64_t) {
  const Fields f = decode(key);
  OneSidedResult r;
  r.error = out_of_bounds(peer, f, offset, bytes);
  if (r.error.empty()) {
    r.error = write_peer_memory(f.pid, f.address + offset, src, bytes);
  }
  if (!r.error.empty()) {
    r.error = fmt::format("writing into rank {}'s memory failed: {}", peer, r.error);
  }
  return r;
}

PeerView CmaOneSided::map(int peer, const MemoryKey& key, std::string& why) {
  const Fields f = decode(key);
  if (!in_region(f)) {
    why = fmt::format("rank {}'s buffer is not in a SharedBuffer", peer);
    return {};
  }
  std::shared_ptr<PeerMapping> m = buffers_.map(f.pid, f.region, why);
  if (m == nullptr) {
    return {};
  }
  std::byte* at = m->at(f.region.base, f.address);
  return {at, std::move(m)};
}

}  // namespace chorus::cpu
