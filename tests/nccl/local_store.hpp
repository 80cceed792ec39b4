// SPDX-License-Identifier: BSD-3-Clause
// LocalStore: a minimal in-process Store for single-process nccl tests, so they depend on no
// other store implementation. Waiting calls honour their timeout and throw TimeoutError.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

namespace chorus::test {

class LocalStore final : public Store {
 public:
  LocalStore() : Store(std::chrono::seconds(30)) {}

  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard lock(mu_);
      map_[key] = value;
    }
    cv_.notify_all();
  }
  Bytes get(const std::string& key, std::optional<Duration> timeout = {}) override {
    wait({key}, timeout);
    std::lock_guard lock(mu_);
    return map_.at(key);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t value = 0;
    {
      std::lock_guard lock(mu_);
      auto& bytes = map_[key];
      if (!bytes.empty()) {
        value = std::stoll(to_string(bytes));
      }
      value += delta;
      bytes = to_bytes(std::to_string(value));
    }
    cv_.notify_all();
    return value;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    const Bytes current = it == map_.end() ? Bytes{} : it->second;
    if (current == expected) {
      map_[key] = desired;
      cv_.notify_all();
      return desired;
    }
    return current;
  }
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = {}) override {
    std::unique_lock lock(mu_);
    const bool ok = cv_.wait_for(lock, resolve_timeout(timeout), [&] {
      for (const auto& key : keys) {
        if (map_.count(key) == 0) {
          return false;
        }
      }
      return true;
    });
    if (!ok) {
      ErrorContext ctx{.op = "store.wait", .timeout = resolve_timeout(timeout)};
      throw TimeoutError("LocalStore: timed out waiting for key " + keys.front(), ctx);
    }
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard lock(mu_);
    for (const auto& key : keys) {
      if (map_.count(key) == 0) {
        return false;
      }
    }
    return true;
  }
  bool delete_key(const std::string& key) override {
    std::lock_guard lock(mu_);
    return map_.erase(key) > 0;
  }
  std::int64_t num_keys() override {
    std::lock_guard lock(mu_);
    return static_cast<std::int64_t>(map_.size());
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> map_;
};

}  // namespace chorus::test
