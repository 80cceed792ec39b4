// SPDX-License-Identifier: BSD-3-Clause
// HashStore: an in-process Store (threads of one process): a map, a mutex and a condvar.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "core/format.hpp"
#include "store/kv_table.hpp"
#include "store/missing_keys.hpp"

namespace chorus {
namespace {

class HashStore final : public Store {
 public:
  explicit HashStore(std::optional<Duration> timeout) : Store(timeout) {}

  // Every user of an in-process store is on this host.
  std::optional<std::string> server_host() const override { return "127.0.0.1"; }

  void set(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = value;
    cv_.notify_all();
  }

  Bytes get(const std::string& key, std::optional<Duration> timeout) override {
    const Duration t = resolve_timeout(timeout);
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, {key}, t, "get");
    return map_.at(key);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::int64_t current = 0;
    auto it = map_.find(key);
    if (it != map_.end()) {
      auto parsed = store::parse_counter(it->second);
      if (!parsed) {
        throw StoreError(
            fmt::format("HashStore add('{}'): the key holds a value that is not an "
                        "integer counter; use a key only as a counter",
                        key));
      }
      current = *parsed;
    }
    const auto next = store::checked_counter_add(current, delta);
    if (!next) {
      throw StoreError("HashStore " + store::counter_overflow_message(key, current, delta));
    }
    map_[key] = to_bytes(std::to_string(*next));
    cv_.notify_all();
    return *next;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (expected.empty()) {
        map_[key] = desired;
        cv_.notify_all();
        return desired;
      }
      return {};
    }
    if (it->second == expected) {
      it->second = desired;
    }
    return it->second;
  }

  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, keys, resolve_timeout(timeout), "wait");
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys) {
      if (map_.count(k) == 0) {
        return false;
      }
    }
    return true;
  }

  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.erase(key) != 0;
  }

  std::int64_t num_keys() override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<std::int64_t>(map_.size());
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::optional<Duration> timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, keys, resolve_timeout(timeout), "multi_get");
    std::vector<Bytes> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
      out.push_back(map_.at(k));
    }
    return out;
  }

  KeyWithOthers get_with(const std::string& key, const std::vector<std::string>& others,
                         std::optional<Duration> timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, {key}, resolve_timeout(timeout), "get");
    KeyWithOthers out;
    out.value = map_.at(key);
    out.others.reserve(others.size());
    for (const auto& other : others) {
      auto it = map_.find(other);
      out.others.push_back(it != map_.end() ? std::optional<Bytes>(it->second) : std::nullopt);
    }
    return out;
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size()) {
      throw InvalidArgument(fmt::format("multi_set: {} keys but {} values; pass one value per key",
                                        keys.size(), values.size()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      map_[keys[i]] = values[i];
    }
    cv_.notify_all();
  }

  void append(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    Bytes& v = map_[key];
    v.insert(v.end(), value.begin(), value.end());
    cv_.notify_all();
  }

 private:
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   Duration timeout, const char* op) {
    const Deadline deadline = Deadline::after(timeout);
    auto all_present = [&] {
      for (const auto& k : keys) {
        if (map_.count(k) == 0) {
          return false;
        }
      }
      return true;
    };
    if (cv_.wait_until(lock, deadline.when(), all_present)) {
      return;
    }
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (map_.count(k) == 0) {
        missing.push_back(k);
      }
    }
    store::throw_keys_timeout(fmt::format("HashStore {}", op), op, timeout, missing,
                              "the thread that sets them has not arrived");
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Bytes> map_;  // guarded by mu_
};

}  // namespace

std::shared_ptr<Store> make_hash_store(std::optional<Duration> default_timeout) {
  return std::make_shared<HashStore>(default_timeout);
}

}  // namespace chorus
