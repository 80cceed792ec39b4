// SPDX-License-Identifier: BSD-3-Clause
// ForwardingTransport: an EngineTransport that hands every call to the transport it wraps.
// Decorators (ShmTransport, FaultTransport) derive from it and override only what they change.
// Capabilities (small_ops()) are forwarded: a decorator offers what the layer below offers,
// unless it overrides the accessor (to offer its own, or to hide the one below).
// post_recv_reduce is not forwarded (it keeps Transport's "cannot"): a decorator that watches
// transfers would not see the fused ones. A decorator that can fuse overrides it.
#pragma once

#include "core/private.hpp"

#include <memory>
#include <utility>

#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

class ForwardingTransport : public EngineTransport {
 public:
  explicit ForwardingTransport(std::unique_ptr<EngineTransport> inner) : inner_(std::move(inner)) {}

  void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override {
    inner_->post_send(peer, data, bytes, token);
  }
  void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) override {
    inner_->post_recv(peer, data, bytes, token);
  }
  OneSided* one_sided() noexcept override { return inner_->one_sided(); }
  void send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                std::uint64_t token) override {
    inner_->send_p2p(peer, tag, data, bytes, token);
  }
  void recv_p2p(int peer, std::uint32_t tag, void* data, std::size_t bytes,
                std::uint64_t token) override {
    inner_->recv_p2p(peer, tag, data, bytes, token);
  }
  void send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) override {
    inner_->send_control(peer, type, std::move(payload));
  }
  void poll(Deadline until, std::vector<std::uint64_t>& completed,
            std::vector<TransportEvent>& events) override {
    inner_->poll(until, completed, events);
  }
  void wakeup() noexcept override { inner_->wakeup(); }
  void drop_all() noexcept override { inner_->drop_all(); }
  void flush_control(Deadline until) override { inner_->flush_control(until); }
  void close_all() noexcept override { inner_->close_all(); }
  void sever(int peer) noexcept override { inner_->sever(peer); }
  void op_starting(const OpSignature& sig) noexcept override { inner_->op_starting(sig); }
  void before_poll(const PollHint& hint) noexcept override { inner_->before_poll(hint); }
  SmallOps* small_ops() noexcept override { return inner_->small_ops(); }
  bool peer_connected(int peer) const override { return inner_->peer_connected(peer); }
  std::optional<Clock::time_point> last_heard(int peer) const override {
    return inner_->last_heard(peer);
  }
  const std::string& address(int peer) const override { return inner_->address(peer); }
  const std::string& local_address() const override { return inner_->local_address(); }

 protected:
  std::unique_ptr<EngineTransport> inner_;
};

}  // namespace chorus::cpu
