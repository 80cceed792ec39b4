// SPDX-License-Identifier: BSD-3-Clause
#include "chorus_c10d_store.hpp"

#include <optional>

#include <pybind11/pybind11.h>

#include "torch_base.hpp"

namespace chorus::torch_bridge {
namespace {

// Every call may block on the network: a caller that holds the GIL lets go of it meanwhile
// (torch's own bindings release it before calling; C++ callers may hold it or not).
class NoGil {
 public:
  NoGil() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      released_.emplace();
    }
  }

 private:
  std::optional<pybind11::gil_scoped_release> released_;
};

class ChorusC10dStore final : public c10d::Store {
 public:
  ChorusC10dStore(std::shared_ptr<chorus::Store> store, Duration timeout)
      : c10d::Store(timeout), store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    NoGil no_gil;
    store_->set(key, value);
  }
  std::vector<std::uint8_t> compareSet(const std::string& key,
                                       const std::vector<std::uint8_t>& expected,
                                       const std::vector<std::uint8_t>& desired) override {
    NoGil no_gil;
    return store_->compare_set(key, expected, desired);
  }
  std::vector<std::uint8_t> get(const std::string& key) override {
    NoGil no_gil;
    return store_->get(key, timeout_);
  }
  std::int64_t add(const std::string& key, std::int64_t value) override {
    NoGil no_gil;
    return store_->add(key, value);
  }
  bool deleteKey(const std::string& key) override {
    NoGil no_gil;
    return store_->delete_key(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    NoGil no_gil;
    return store_->check(keys);
  }
  std::int64_t getNumKeys() override {
    NoGil no_gil;
    return store_->num_keys();
  }
#if CHORUS_TORCH_STORE_CLONE
  // A copy for another thread, over the same store: chorus's stores are thread-safe.
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<ChorusC10dStore>(store_, timeout_);
  }
#endif
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    NoGil no_gil;
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<chorus::Store> store_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> make_c10d_store(std::shared_ptr<Store> store, Duration timeout) {
  return c10::make_intrusive<ChorusC10dStore>(std::move(store), timeout);
}

}  // namespace chorus::torch_bridge
