// SPDX-License-Identifier: BSD-3-Clause
#include "torch_store.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

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
#if TORCH_VERSION_MAJOR >= 2
  opts.useLibUV = false;  // a client's protocol is the same; some builds (Debian's) lack libuv
#endif
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(chain.host, opts);
  for (auto it = chain.prefixes.rbegin(); it != chain.prefixes.rend(); ++it) {
    store = c10::make_intrusive<c10d::PrefixStore>(*it, store);
  }
  return store;
}

class TorchStore final : public Store {
 public:
  TorchStore(c10::intrusive_ptr<c10d::Store> store, Duration default_timeout)
      : Store(default_timeout), store_(std::move(store)), chain_(tcp_chain(store_)) {
    if (chain_) {
      // A connection of our own: a TCPStore wait leaves its timeout on the client's socket
      // (torch 1.13 and 2.x), and a wait that ran out leaves the connection out of step, so
      // our short waits must not touch the connection torch itself goes on using.
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

  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) override {
    const Duration bound = resolve_timeout(timeout);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound);
    bool present = false;
    guarded("store.check", [&] { present = current()->check(keys); });
    if (present) {
      return;  // the common case of a get with no wait, without a torch wait
    }
    c10::intrusive_ptr<c10d::Store> store = current();
    try {
      store->wait(keys, std::max(ms, std::chrono::milliseconds(1)));
      if (chain_ && ms != chain_->timeout) {
        replace_connection();  // its socket keeps this wait's timeout for every later request
      }
    } catch (const std::exception& e) {
      // torch says "Socket Timeout" or "Wait timeout" for a wait that ran out; tell that
      // apart from a store that went away by asking which keys are still missing.
      std::vector<std::string> missing;
      try {
        replace_connection();  // out of step with its server (see replace_connection)
        store = current();
        for (const auto& k : keys) {
          if (!store->check({k})) {
            missing.push_back(k);
          }
        }
      } catch (const std::exception&) {
        throw StoreError(std::string("torch's store failed while waiting for ") + join(keys) +
                         ": " + e.what() +
                         "; check that the process hosting torch's store (rank 0, or the "
                         "launcher's store at MASTER_ADDR:MASTER_PORT) is still running");
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

  // torch's store, over a fresh connection if the last one was given up.
  c10::intrusive_ptr<c10d::Store> current() {
    std::lock_guard<std::mutex> lock(mu_);
    if (dirty_) {
      store_ = reconnect(*chain_);
      dirty_ = false;
    }
    return store_;
  }

  // The next call goes over a new connection to the same TCPStore server (other stores keep
  // theirs). Needed after a wait: its timeout stays on the socket, and a TCPStore client whose
  // wait ran out is out of step with its server, which still answers that wait when the keys
  // arrive; torch 1.13 reads that late answer as the reply to the next request.
  void replace_connection() {
    if (chain_) {
      std::lock_guard<std::mutex> lock(mu_);
      dirty_ = true;
    }
  }

  std::mutex mu_;
  c10::intrusive_ptr<c10d::Store> store_;  // guarded by mu_
  bool dirty_ = false;                     // guarded by mu_: store_ must be replaced (TCP only)
  const std::optional<TcpChain> chain_;
};

}  // namespace

std::shared_ptr<Store> make_torch_store(c10::intrusive_ptr<c10d::Store> store,
                                        Duration default_timeout) {
  return std::make_shared<TorchStore>(std::move(store), default_timeout);
}

}  // namespace chorus::torch_bridge
