// SPDX-License-Identifier: BSD-3-Clause
// Store base: default timeout and the multi-key defaults built on single-key calls.
#include <chorus/store.hpp>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"

namespace chorus {

Store::Store(std::optional<Duration> default_timeout)
    : default_timeout_(default_timeout ? *default_timeout : env::resolve_default_timeout()) {}

Store::~Store() = default;

std::vector<Bytes> Store::multi_get(const std::vector<std::string>& keys,
                                    std::optional<Duration> timeout) {
  // One deadline for the whole call, not one per key.
  const Deadline deadline = Deadline::after(resolve_timeout(timeout));
  wait(keys, deadline.remaining());
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) {
    values.push_back(get(key, deadline.remaining()));
  }
  return values;
}

KeyWithOthers Store::get_with(const std::string& key, const std::vector<std::string>& others,
                              std::optional<Duration> timeout) {
  KeyWithOthers out;
  out.value = get(key, timeout);
  out.others.reserve(others.size());
  for (const auto& other : others) {
    std::optional<Bytes> value;
    if (check({other})) {
      try {
        value = get(other, Duration::zero());
      } catch (const TimeoutError&) {
        // Deleted between the check and the read: absent.
      }
    }
    out.others.push_back(std::move(value));
  }
  return out;
}

void Store::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw InvalidArgument(fmt::format("multi_set: {} keys but {} values; pass one value per key",
                                      keys.size(), values.size()));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    set(keys[i], values[i]);
  }
}

void Store::append(const std::string& key, const Bytes& value) {
  // Optimistic loop over compare_set: correct under concurrent appenders.
  Bytes current = check({key}) ? get(key) : Bytes{};
  for (;;) {
    Bytes desired = current;
    desired.insert(desired.end(), value.begin(), value.end());
    Bytes stored = compare_set(key, current, desired);
    if (stored == desired) {
      return;
    }
    current = std::move(stored);
  }
}

}  // namespace chorus
