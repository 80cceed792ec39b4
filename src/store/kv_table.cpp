// SPDX-License-Identifier: BSD-3-Clause
// Key map and parked watches of the TcpStore server.
#include "store/kv_table.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace chorus::store {

std::optional<std::int64_t> parse_counter(const Bytes& value) {
  if (value.empty()) {
    return std::nullopt;
  }
  std::int64_t v = 0;
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last) {
    return std::nullopt;
  }
  return v;
}

std::optional<std::int64_t> checked_counter_add(std::int64_t current, std::int64_t delta) noexcept {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return std::nullopt;
  }
  return sum;
}

std::string counter_overflow_message(const std::string& key, std::int64_t current,
                                     std::int64_t delta) {
  return fmt::format(
      "add('{}', {}): the counter holds {} and the sum leaves the int64 range; the "
      "counter is unchanged (reset it with set() or use another key)",
      key, delta, current);
}

const Bytes* KvTable::find(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

Bytes* KvTable::find_slot(std::string_view key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

const std::vector<std::string>& KvTable::keys() const {
  // Cached: many list_keys calls on a large table must not each pay for a sort.
  if (!sorted_valid_) {
    sorted_keys_.clear();
    sorted_keys_.reserve(map_.size());
    for (const auto& [k, v] : map_) {
      sorted_keys_.push_back(k);
    }
    std::sort(sorted_keys_.begin(), sorted_keys_.end());
    sorted_valid_ = true;
  }
  return sorted_keys_;
}

std::size_t KvTable::growth_if_set(std::string_view key, std::size_t value_bytes) const {
  auto it = map_.find(key);
  if (it == map_.end()) {
    return key.size() + value_bytes + kEntryOverhead;
  }
  return value_bytes > it->second.size() ? value_bytes - it->second.size() : 0;
}

void KvTable::on_key_created(const std::string& key) {
  key_bytes_ += key.size();
  ++key_generation_;
  sorted_valid_ = false;
  auto it = waiting_.find(key);
  if (it == waiting_.end()) {
    return;
  }
  std::unordered_set<WatchId> ids = std::move(it->second);
  waiting_.erase(it);
  for (WatchId id : ids) {
    auto w = watches_.find(id);
    if (w == watches_.end() || --w->second.pending > 0) {
      continue;
    }
    // Every awaited key was created at some point; one may have been deleted since.
    park(id, w->second);
  }
}

void KvTable::park(WatchId id, Watch& watch) {
  watch.pending = 0;
  for (const auto& key : watch.keys) {
    if (!contains(key)) {
      auto& set = waiting_[key];
      if (set.insert(id).second) {
        ++watch.pending;
      }
    }
  }
  if (watch.pending == 0) {
    ready_.push_back(id);
    watches_.erase(id);
  }
}

void KvTable::set(const std::string& key, Bytes value) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    stored_bytes_ = stored_bytes_ - it->second.size() + value.size();
    it->second = std::move(value);
    return;
  }
  stored_bytes_ += key.size() + value.size() + kEntryOverhead;
  map_.emplace(key, std::move(value));
  on_key_created(key);
}

void KvTable::store_value(Bytes& held, std::span<const std::uint8_t> value) {
  stored_bytes_ = stored_bytes_ - held.size() + value.size();
  if (held.capacity() > 2 * value.size() + 64) {
    Bytes(value.begin(), value.end()).swap(held);  // do not keep a large buffer for a small value
  } else {
    held.assign(value.begin(), value.end());
  }
}

void KvTable::set_view(std::string_view key, std::span<const std::uint8_t> value) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    store_value(it->second, value);
    return;
  }
  stored_bytes_ += key.size() + value.size() + kEntryOverhead;
  auto [created, inserted] = map_.emplace(std::string(key), Bytes(value.begin(), value.end()));
  (void)inserted;
  on_key_created(created->first);
}

KvTable::AddResult KvTable::add(std::string_view key, std::int64_t delta) {
  auto it = map_.find(key);
  std::int64_t current = 0;
  if (it != map_.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed) {
      return {AddResult::Status::not_integer, 0};
    }
    current = *parsed;
  }
  const auto next = checked_counter_add(current, delta);
  if (!next) {
    return {AddResult::Status::overflow, current};
  }
  char text[24];
  const auto [end, ec] = std::to_chars(text, text + sizeof(text), *next);
  (void)ec;  // 24 characters hold every int64
  const std::span<const std::uint8_t> digits(reinterpret_cast<const std::uint8_t*>(text),
                                             static_cast<std::size_t>(end - text));
  if (it != map_.end()) {
    store_value(it->second, digits);
  } else {
    set_view(key, digits);
  }
  return {AddResult::Status::ok, *next};
}

Bytes KvTable::compare_set(const std::string& key, const Bytes& expected, Bytes desired) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (expected.empty()) {
      Bytes copy = desired;
      set(key, std::move(desired));
      return copy;
    }
    return {};
  }
  if (it->second == expected) {
    stored_bytes_ = stored_bytes_ - it->second.size() + desired.size();
    it->second = std::move(desired);
  }
  return it->second;
}

void KvTable::append(const std::string& key, const Bytes& value) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    set(key, value);
    return;
  }
  it->second.insert(it->second.end(), value.begin(), value.end());
  stored_bytes_ += value.size();
}

bool KvTable::erase(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    return false;
  }
  stored_bytes_ -= key.size() + it->second.size() + kEntryOverhead;
  map_.erase(it);
  key_bytes_ -= key.size();
  ++key_generation_;
  sorted_valid_ = false;
  return true;
}

KvTable::WatchId KvTable::add_watch(const std::vector<std::string>& keys) {
  if (std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return contains(k); })) {
    return 0;
  }
  const WatchId id = next_id_++;
  Watch& w = watches_[id];
  w.keys = keys;
  park(id, w);
  return id;
}

bool KvTable::remove_watch(WatchId id) {
  auto w = watches_.find(id);
  if (w == watches_.end()) {
    // It may be queued in ready_ (became ready, not yet taken).
    auto r = std::find(ready_.begin(), ready_.end(), id);
    if (r != ready_.end()) {
      ready_.erase(r);
      return true;
    }
    return false;
  }
  for (const auto& key : w->second.keys) {
    auto it = waiting_.find(key);
    if (it != waiting_.end()) {
      it->second.erase(id);
      if (it->second.empty()) {
        waiting_.erase(it);
      }
    }
  }
  watches_.erase(w);
  return true;
}

std::vector<std::string> KvTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (!contains(k)) {
      out.push_back(k);
    }
  }
  return out;
}

std::vector<KvTable::WatchId> KvTable::take_ready() {
  std::vector<WatchId> out;
  out.swap(ready_);
  return out;
}

}  // namespace chorus::store
