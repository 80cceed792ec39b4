// SPDX-License-Identifier: BSD-3-Clause
#include "torch_store.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include "torch_base.hpp"

namespace chorus::torch_bridge {

namespace {

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    out += out.empty() ? k : ", " + k;
  }
  return out;
}

// PrefixStore keeps its prefix protected, with no getter in torch 1.13.
struct PrefixOf : c10d::PrefixStore {
  static const std::string& get(const c10d::PrefixStore& store) {
    return store.*(&PrefixOf::prefix_);
  }
};

// torch's store as layers: PrefixStore prefixes (outermost first) over a TCPStore.
struct TcpChain {
  std::vector<std::string> prefixes;
  std::string host;
  std::uint16_t port = 0;
  std::chrono::milliseconds timeout{0};
};

std::optional<TcpChain> tcp_chain(c10::intrusive_ptr<c10d::Store> store) {
  TcpChain chain;
  for (int depth = 0; depth < 16 && store; ++depth) {
    if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(store.get())) {
      chain.prefixes.push_back(PrefixOf::get(*prefix));
      store = prefix->getUnderlyingStore();
      continue;
    }
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get())) {
      chain.host = tcp->getHost();
      chain.port = tcp->getPort();
      chain.timeout = tcp->getTimeout();
      return chain;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// The same layers over a new client connection to the same TCPStore server.
c10::intrusive_ptr<c10d::Store> reconnect(const TcpChain& chain) {
  c10d::TCPStoreOptions opts;
  opts.port = chain.port;
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = chain.timeout;
#if CHORUS_TORCH_STORE_LIBUV_OPTION
  opts.useLibUV = false;  // a client's protocol is the same; some builds (Debian's) lack libuv
#endif
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(chain.host, opts);
  for (auto it = chain.prefixes.rbegin(); it != chain.prefixes.rend(); ++it) {
    store = c10::make_intrusive<c10d::PrefixStore>(*it, store);
  }
  return store;
}

// Waiting on a TCPStore by looking: the first look at once, then after pauses that grow by
// half from kFirstPause up to the cap, which grows with the group (a millisecond per rank,
// from kPauseCap up to kPauseCapMax): the whole group's looks stay under about a thousand a
// second, as chorus's own waiting slices do (src/cpu/bootstrap/membership.cpp). A key that
// arrives is seen at most half the time waited so far later, and at most the cap later.
constexpr std::chrono::milliseconds kFirstPause{1};
constexpr std::chrono::milliseconds kPauseCap{50};
constexpr std::chrono::milliseconds kPauseCapMax{1000};

class TorchStore final : public Store {
 public:
  TorchStore(c10::intrusive_ptr<c10d::Store> store, Duration default_timeout, int group_size)
      : Store(default_timeout),
        store_(std::move(store)),
        chain_(tcp_chain(store_)),
        pause_cap_(
            std::clamp<Duration>(std::chrono::milliseconds(group_size), kPauseCap, kPauseCapMax)) {
    if (chain_) {
      // A connection of our own, so that our looks never queue behind a wait of torch's on
      // its connection (and on torch 1.13, whose client keeps the timeout of its last wait on
      // the socket, never change it).
      store_ = reconnect(*chain_);
    }
    // torch 1.13's FileStore creates its file on the first write, and a check() before that
    // throws "No such file or directory" instead of answering false: write first.
    guarded("store.add", [&] { current()->add("chorus/store_ready", 0); });
  }

  void set(const std::string& key, const Bytes& value) override {
    guarded("store.set", [&] { current()->set(key, value); });
  }

  Bytes get(const std::string& key, std::optional<Duration> timeout) override {
    wait({key}, timeout);
    Bytes value;
    guarded("store.get", [&] { value = current()->get(key); });
    return value;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t value = 0;
    guarded("store.add", [&] { value = current()->add(key, delta); });
    return value;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes value;
    guarded("store.compare_set", [&] { value = current()->compareSet(key, expected, desired); });
    return value;
  }

  // chorus waits in slices that often run out (a rank 0 waiting for late members looks at
  // its listener every 100 ms). torch 2.x's TCPStore client logs a warning for every wait
  // that runs out ("waitForInput ... timed out after 100ms"), and torch 1.13's leaves the
  // connection out of step with its server: on a TCPStore chorus looks instead (check(),
  // paced as above) and never lets a torch wait run out. Other stores (FileStore, HashStore,
  // a Python store) take torch's wait, which they end quietly.
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) override {
    const Duration bound = resolve_timeout(timeout);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound);
    if (check(keys)) {
      return;  // the common case of a get with no wait
    }
    if (chain_) {
      const auto deadline = std::chrono::steady_clock::now() + bound;
      std::chrono::microseconds pause = kFirstPause;
      try {
        for (;;) {
          const auto now = std::chrono::steady_clock::now();
          if (now >= deadline) {
            break;
          }
          std::this_thread::sleep_for(
              std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
          if (check(keys)) {
            return;
          }
          pause = std::min<std::chrono::microseconds>(pause + pause / 2, pause_cap_);
        }
      } catch (const StoreError& e) {
        throw StoreError(std::string(e.what()) + " while waiting for " + join(keys) +
                         "; check that the process hosting torch's store (rank 0, or the "
                         "launcher's store at MASTER_ADDR:MASTER_PORT) is still running");
      }
    } else {
      try {
        current()->wait(keys, std::max(ms, std::chrono::milliseconds(1)));
        return;
      } catch (const std::exception& e) {
        // torch says "Wait timeout" for a wait that ran out; tell that apart from a store that
        // went away by asking which keys are still missing (below).
        try {
          static_cast<void>(check(keys));
        } catch (const std::exception&) {
          throw StoreError(std::string("torch's store failed while waiting for ") + join(keys) +
                           ": " + e.what());
        }
      }
    }
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!check({k})) {
        missing.push_back(k);
      }
    }
    if (missing.empty()) {
      return;  // they arrived just as the wait gave up
    }
    ErrorContext context;
    context.op = "store.wait";
    context.timeout = bound;
    throw TimeoutError("timed out after " + std::to_string(ms.count()) +
                           " ms waiting for keys in torch's store: " + join(missing),
                       context);
  }

  bool check(const std::vector<std::string>& keys) override {
    bool present = false;
    guarded("store.check", [&] { present = current()->check(keys); });
    return present;
  }

  bool delete_key(const std::string& key) override {
    bool deleted = false;
    guarded("store.delete_key", [&] { deleted = current()->deleteKey(key); });
    return deleted;
  }

  std::int64_t num_keys() override {
    std::int64_t n = 0;
    guarded("store.num_keys", [&] { n = current()->getNumKeys(); });
    return n;
  }

  std::optional<std::string> server_host() const override {
    return chain_ ? std::optional<std::string>(chain_->host) : std::nullopt;
  }

 private:
  template <class F>
  static void guarded(const char* op, F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      ErrorContext context;
      context.op = op;
      throw StoreError(std::string(op) + " on torch's store failed: " + e.what(), context);
    }
  }

  c10::intrusive_ptr<c10d::Store> current() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_;
  }

  std::mutex mu_;
  c10::intrusive_ptr<c10d::Store> store_;  // guarded by mu_
  const std::optional<TcpChain> chain_;
  const Duration pause_cap_;
};

}  // namespace

std::shared_ptr<Store> make_torch_store(c10::intrusive_ptr<c10d::Store> store,
                                        Duration default_timeout, int group_size) {
  return std::make_shared<TorchStore>(std::move(store), default_timeout, group_size);
}

}  // namespace chorus::torch_bridge
