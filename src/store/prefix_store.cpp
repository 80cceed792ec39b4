// SPDX-License-Identifier: BSD-3-Clause
// PrefixStore: every key is seen through "<prefix>/" on an underlying store.
#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "store/store_token.hpp"

namespace chorus {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : Store(base->default_timeout()), prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  void set(const std::string& key, const Bytes& value) override { base_->set(k(key), value); }
  std::optional<std::string> server_host() const override { return base_->server_host(); }
  Bytes get(const std::string& key, std::optional<Duration> timeout) override {
    return base_->get(k(key), resolve_timeout(timeout));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return base_->add(k(key), delta);
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->compare_set(k(key), expected, desired);
  }
  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) override {
    base_->wait(ks(keys), resolve_timeout(timeout));
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(ks(keys)); }
  bool delete_key(const std::string& key) override { return base_->delete_key(k(key)); }
  std::int64_t num_keys() override { return base_->num_keys(); }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::optional<Duration> timeout) override {
    return base_->multi_get(ks(keys), resolve_timeout(timeout));
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    base_->multi_set(ks(keys), values);
  }
  void append(const std::string& key, const Bytes& value) override { base_->append(k(key), value); }
  KeyWithOthers get_with(const std::string& key, const std::vector<std::string>& others,
                         std::optional<Duration> timeout) override {
    return base_->get_with(k(key), ks(others), resolve_timeout(timeout));
  }
  const Store& base() const noexcept { return *base_; }

 private:
  std::string k(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& key : keys) {
      out.push_back(k(key));
    }
    return out;
  }

  std::string prefix_;  // ends with '/'
  std::shared_ptr<Store> base_;
};

}  // namespace

const Store* store::prefix_base(const Store& s) noexcept {
  const auto* p = dynamic_cast<const PrefixStore*>(&s);
  return p ? &p->base() : nullptr;
}

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base) {
  if (!base) {
    throw InvalidArgument("make_prefix_store: the base store is null; pass the store to wrap");
  }
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace chorus
