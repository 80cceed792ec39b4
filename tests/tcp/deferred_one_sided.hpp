// SPDX-License-Identifier: BSD-3-Clause
// DeferredOneSided: a one-sided capability whose reads and writes complete later, as an RDMA
// transport's would: post_read/post_write only queue the transfer and answer `pending`; the
// fabric that owns it runs a queued transfer (through the capability it wraps) whenever it
// chooses, in any order, and hands its token to the rank's executor then. The data moves at
// completion, not at posting, so a schedule that reads a buffer before the transfer's
// dependencies allow, or reuses one before its transfer completed, gives a wrong result here.
// Never maps: every access goes through read and write tasks.
//
// DeferredOneSidedTransport offers one over any EngineTransport (MemoryFabric's endpoints, for
// whole engines): each poll() completes a random number of the queued transfers, in random
// order, and hands their tokens out with the inner transport's completions.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/plan/one_sided.hpp"
#include "cpu/transports/cma/cma_one_sided.hpp"
#include "cpu/transports/forwarding_transport.hpp"

namespace chorus::test {

class DeferredOneSided final : public cpu::OneSided {
 public:
  explicit DeferredOneSided(cpu::OneSided& inner) : inner_(inner) {}

  cpu::MemoryKey register_buffer(const void* data, std::size_t bytes) const override {
    return inner_.register_buffer(data, bytes);
  }
  bool mappable(const cpu::MemoryKey& key) const noexcept override { return inner_.mappable(key); }
  cpu::PeerView map(int, const cpu::MemoryKey&, std::string& why) override {
    why = "a deferred-completion test transport maps nothing";
    return {};
  }
  cpu::OneSidedResult post_read(int peer, const cpu::MemoryKey& key, std::size_t offset, void* dst,
                                std::size_t bytes, std::uint64_t token) override {
    queued_.push_back({true, peer, key, offset, dst, nullptr, bytes, token});
    return {true, {}};
  }
  cpu::OneSidedResult post_write(int peer, const cpu::MemoryKey& key, std::size_t offset,
                                 const void* src, std::size_t bytes, std::uint64_t token) override {
    queued_.push_back({false, peer, key, offset, nullptr, src, bytes, token});
    return {true, {}};
  }

  std::size_t queued() const noexcept { return queued_.size(); }
  // Forgets every queued transfer (the group failed: no buffer is touched afterwards).
  void drop() noexcept { queued_.clear(); }
  // Runs queued transfer `i` now and returns its token; a failure is appended to `errors`.
  std::uint64_t complete(std::size_t i, std::vector<std::string>& errors) {
    const Transfer t = queued_[i];
    queued_.erase(queued_.begin() + static_cast<std::ptrdiff_t>(i));
    const cpu::OneSidedResult r =
        t.read ? inner_.post_read(t.peer, t.key, t.offset, t.dst, t.bytes, t.token)
               : inner_.post_write(t.peer, t.key, t.offset, t.src, t.bytes, t.token);
    if (!r.ok()) {
      errors.push_back(r.pending ? "the inner capability did not complete inline" : r.error);
    }
    return t.token;
  }

 private:
  struct Transfer {
    bool read;
    int peer;
    cpu::MemoryKey key;  // a copy: the task's key need only live until it is posted
    std::size_t offset;
    void* dst;
    const void* src;
    std::size_t bytes;
    std::uint64_t token;
  };
  cpu::OneSided& inner_;
  std::vector<Transfer> queued_;
};

class DeferredOneSidedTransport final : public cpu::ForwardingTransport {
 public:
  DeferredOneSidedTransport(std::unique_ptr<cpu::EngineTransport> inner, std::uint32_t seed)
      : ForwardingTransport(std::move(inner)), rng_(seed) {}

  cpu::OneSided* one_sided() noexcept override { return &deferred_; }
  void poll(Deadline until, std::vector<std::uint64_t>& completed,
            std::vector<cpu::TransportEvent>& events) override {
    if (const std::size_t queued = deferred_.queued(); queued > 0) {
      std::size_t k = std::uniform_int_distribution<std::size_t>(1, queued)(rng_);
      while (k-- > 0) {
        const std::size_t i =
            std::uniform_int_distribution<std::size_t>(0, deferred_.queued() - 1)(rng_);
        completed.push_back(deferred_.complete(i, errors_));
        ++done_;
      }
      until = Deadline::after(Duration::zero());  // results are pending: do not sleep
    }
    inner_->poll(until, completed, events);
  }
  void drop_all() noexcept override {
    deferred_.drop();
    inner_->drop_all();
  }
  // Transfers completed so far, and those that failed (the ranks are threads of one process:
  // none should).
  std::size_t completed() const noexcept { return done_; }
  const std::vector<std::string>& errors() const noexcept { return errors_; }

 private:
  cpu::CmaOneSided cma_;  // the ranks are threads of this process: CMA reaches their memory
  DeferredOneSided deferred_{cma_};
  std::mt19937 rng_;
  std::vector<std::string> errors_;
  std::size_t done_ = 0;
};

}  // namespace chorus::test
