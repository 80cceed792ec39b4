// SPDX-License-Identifier: BSD-3-Clause
// The one-sided capability (plan/one_sided.hpp, OneSided) between processes of one host, by cross
// memory attach: reads and writes through process_vm_readv/writev (peer_memory.hpp), and the
// peers' SharedBuffers mapped here (peer_buffers.hpp) for plain loads and stores.
//
// A key holds the registering process's pid, the address and length of the memory, and, where
// it lies in a SharedBuffer, the buffer's memfd (fd number, inode, base, length). Transfers
// complete inline (never `pending`): a system call each, which costs less than a round through the
// engine would. Offered only where the group's peer memory probe passed (transport_stack.cpp,
// CmaTransport), so that every rank offers it or none does.
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <memory>
#include <utility>

#include "cpu/transports/cma/peer_buffers.hpp"
#include "cpu/transports/forwarding_transport.hpp"
#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

class CmaOneSided final : public OneSided {
 public:
  CmaOneSided();
  MemoryKey register_buffer(const void* data, std::size_t bytes) const override;
  bool mappable(const MemoryKey& key) const noexcept override;
  OneSidedResult post_read(int peer, const MemoryKey& key, std::size_t offset, void* dst,
                           std::size_t bytes, std::uint64_t token) override;
  OneSidedResult post_write(int peer, const MemoryKey& key, std::size_t offset, const void* src,
                            std::size_t bytes, std::uint64_t token) override;
  PeerView map(int peer, const MemoryKey& key, std::string& why) override;

  // The peers' SharedBuffers mapped and kept for later ops (for tests).
  std::size_t kept_mappings() const { return buffers_.kept(); }

 private:
  PeerBuffers buffers_;
  // This process, named in every key: asked once, for getpid() is a system call, and an agreed
  // op registers two buffers (on this paravirtualized VM a system call costs about a
  // microsecond; docs/results.md, "the agreement's cost").
  std::int64_t pid_ = 0;
};

// The transport stack's layer that offers CmaOneSided (one_sided()); everything else goes to
// the transport under it, post_recv_reduce included (the shared-memory rings reduce on
// arrival, and hiding that would cost the rings a copy).
class CmaTransport final : public ForwardingTransport {
 public:
  explicit CmaTransport(std::unique_ptr<EngineTransport> inner)
      : ForwardingTransport(std::move(inner)) {}
  OneSided* one_sided() noexcept override { return &one_sided_; }
  bool post_recv_reduce(int peer, const ReduceOnArrival& r, std::uint64_t token) override {
    return inner_->post_recv_reduce(peer, r, token);
  }

 private:
  CmaOneSided one_sided_;
};

}  // namespace chorus::cpu
