// SPDX-License-Identifier: BSD-3-Clause
// LoopbackFabric: an in-memory Transport for n ranks in one thread, for fast deterministic
// tests of the algorithms. Transfers are rendezvous (a message moves only when the receiver
// has posted the matching receive, and both complete together), which is the strictest
// buffering model: a schedule that finishes here cannot deadlock on full socket buffers.
// Which ready transfer happens next is chosen by a seeded RNG, to shake out ordering bugs.
// Message boundaries are checked: a length mismatch is recorded as a protocol error.
// With `defer_one_sided`, the one-sided capability completes its reads and writes later, out of
// order (deferred_one_sided.hpp): step() runs a queued one among the ready transfers.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/transports/cma/cma_one_sided.hpp"
#include "cpu/transports/transport.hpp"
#include "tcp/deferred_one_sided.hpp"

namespace chorus::test {

class LoopbackFabric {
 public:
  explicit LoopbackFabric(int n, std::uint32_t seed = 1, bool defer_one_sided = false)
      : n_(n),
        rng_(seed),
        sends_(static_cast<std::size_t>(n * n)),
        recvs_(static_cast<std::size_t>(n * n)) {
    for (int r = 0; r < n; ++r) {
      endpoints_.push_back(Endpoint(this, r));
      if (defer_one_sided) {
        deferred_.push_back(std::make_unique<DeferredOneSided>(one_sided_));
      }
    }
  }
  LoopbackFabric(const LoopbackFabric&) = delete;
  LoopbackFabric& operator=(const LoopbackFabric&) = delete;

  struct Completion {
    int rank;
    std::uint64_t token;
  };

  class Endpoint : public cpu::Transport {
   public:
    Endpoint(LoopbackFabric* f, int rank) : fabric_(f), rank_(rank) {}
    void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) override {
      fabric_->sends_[fabric_->channel(rank_, peer)].push_back(
          {const_cast<void*>(data), bytes, token});
    }
    void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t token) override {
      fabric_->recvs_[fabric_->channel(peer, rank_)].push_back({data, bytes, token});
    }
    // The ranks are threads of this process, whose pid names every rank's memory: cross
    // memory attach reaches it (and maps SharedBuffers), so the direct algorithms run here.
    cpu::OneSided* one_sided() noexcept override {
      if (!fabric_->deferred_.empty()) {
        return fabric_->deferred_[static_cast<std::size_t>(rank_)].get();
      }
      return &fabric_->one_sided_;
    }

   private:
    LoopbackFabric* fabric_;
    int rank_;
  };

  cpu::Transport& endpoint(int rank) { return endpoints_[static_cast<std::size_t>(rank)]; }

  // Performs one transfer chosen at random among the ready ones (and the queued one-sided
  // ones); appends the send's and the receive's completions (a one-sided one's). False if
  // nothing can move (done, or deadlocked).
  bool step(std::vector<Completion>& out) {
    ready_.clear();
    for (std::size_t c = 0; c < sends_.size(); ++c) {
      if (!sends_[c].empty() && !recvs_[c].empty()) {
        ready_.push_back(c);
      }
    }
    std::size_t queued = 0;
    for (const auto& d : deferred_) {
      queued += d->queued();
    }
    if (ready_.empty() && queued == 0) {
      return false;
    }
    std::size_t pick =
        std::uniform_int_distribution<std::size_t>(0, ready_.size() + queued - 1)(rng_);
    if (pick >= ready_.size()) {
      pick -= ready_.size();
      for (std::size_t r = 0; r < deferred_.size(); ++r) {
        if (pick < deferred_[r]->queued()) {
          out.push_back({static_cast<int>(r), deferred_[r]->complete(pick, errors_)});
          return true;
        }
        pick -= deferred_[r]->queued();
      }
    }
    const std::size_t c = ready_[pick];
    const Req s = sends_[c].front();
    const Req r = recvs_[c].front();
    sends_[c].pop_front();
    recvs_[c].pop_front();
    const int src = static_cast<int>(c) / n_;
    const int dst = static_cast<int>(c) % n_;
    if (s.bytes != r.bytes) {
      errors_.push_back("rank " + std::to_string(src) + " sent " + std::to_string(s.bytes) +
                        " bytes to rank " + std::to_string(dst) + " which expected " +
                        std::to_string(r.bytes));
    }
    std::memcpy(r.data, s.data, std::min(s.bytes, r.bytes));
    out.push_back({src, s.token});
    out.push_back({dst, r.token});
    return true;
  }

  // Transfers posted but never matched, as "src->dst" strings (for deadlock reports).
  std::string pending() const {
    std::string out;
    for (std::size_t c = 0; c < sends_.size(); ++c) {
      const int src = static_cast<int>(c) / n_;
      const int dst = static_cast<int>(c) % n_;
      if (!sends_[c].empty()) {
        out += " send " + std::to_string(src) + "->" + std::to_string(dst) + " x" +
               std::to_string(sends_[c].size());
      }
      if (!recvs_[c].empty()) {
        out += " recv " + std::to_string(dst) + "<-" + std::to_string(src) + " x" +
               std::to_string(recvs_[c].size());
      }
    }
    return out;
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  struct Req {
    void* data;
    std::size_t bytes;
    std::uint64_t token;
  };
  std::size_t channel(int src, int dst) const { return static_cast<std::size_t>(src * n_ + dst); }

  int n_;
  std::mt19937 rng_;
  std::vector<Endpoint> endpoints_;
  cpu::CmaOneSided one_sided_;
  std::vector<std::unique_ptr<DeferredOneSided>> deferred_;  // by rank, with defer_one_sided
  std::vector<std::deque<Req>> sends_;                       // by channel src*n+dst
  std::vector<std::deque<Req>> recvs_;
  std::vector<std::size_t> ready_;
  std::vector<std::string> errors_;
};

}  // namespace chorus::test
