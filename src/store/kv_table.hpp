// SPDX-License-Identifier: BSD-3-Clause
// KvTable: the TcpStore server's state — the key map and the parked watches of waiting
// get/wait/multi_get calls. No I/O and no clock: unit-testable on its own. Not thread-safe
// (the server's loop thread owns it).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <chorus/store.hpp>

namespace chorus::store {

class KvTable {
 public:
  using WatchId = std::uint64_t;  // 0 = none

  const Bytes* find(std::string_view key) const;
  bool contains(std::string_view key) const { return map_.find(key) != map_.end(); }
  std::size_t size() const noexcept { return map_.size(); }
  const std::vector<std::string>& keys() const;  // sorted; cached until a key is created or erased
  // Bytes of every key name together (what a list_keys reply costs, without building it).
  std::size_t key_bytes() const noexcept { return key_bytes_; }
  // What the stored keys and values cost: their bytes plus kEntryOverhead per key (the map
  // node and string headers), so that a flood of empty values counts too.
  static constexpr std::size_t kEntryOverhead = 64;
  std::size_t stored_bytes() const noexcept { return stored_bytes_; }
  // How much stored_bytes() would grow if `key` were given a value of `value_bytes` bytes
  // (zero when it would shrink).
  std::size_t growth_if_set(std::string_view key, std::size_t value_bytes) const;
  // Changes whenever a key is created or erased (for caches of the key list).
  std::uint64_t key_generation() const noexcept { return key_generation_; }

  // Mutations. Any watch whose keys all exist afterwards is queued for take_ready().
  void set(const std::string& key, Bytes value);
  // The same from views into a request buffer: an existing key's value is overwritten in place
  // (no allocation while its capacity suffices and is not more than twice what is kept).
  void set_view(std::string_view key, std::span<const std::uint8_t> value);
  // For serving from views with one lookup: the value of an existing key (nullptr if missing),
  // and overwriting that value in place (keeps stored_bytes; no watch can fire: the key exists).
  Bytes* find_slot(std::string_view key);
  void overwrite(Bytes& held, std::span<const std::uint8_t> value) { store_value(held, value); }
  // Whether a mutation made watches ready (take_ready() would return some).
  bool has_ready() const noexcept { return !ready_.empty(); }
  // Adds delta to the decimal integer at key (missing = 0). Nothing changes unless status is ok.
  struct AddResult {
    enum class Status { ok, not_integer, overflow } status = Status::ok;
    std::int64_t value = 0;  // ok: the new value; overflow: the current value
  };
  AddResult add(std::string_view key, std::int64_t delta);
  // See Store::compare_set. Returns the value stored afterwards (empty if the key is missing).
  Bytes compare_set(const std::string& key, const Bytes& expected, Bytes desired);
  void append(const std::string& key, const Bytes& value);
  bool erase(const std::string& key);

  // Parks a watch on keys. Returns 0 if every key exists already (nothing parked).
  WatchId add_watch(const std::vector<std::string>& keys);
  // Removes a parked watch (timed out, or its connection closed). False if unknown.
  bool remove_watch(WatchId id);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // Watches that became ready since the last call; they are no longer parked.
  std::vector<WatchId> take_ready();
  std::size_t num_watches() const noexcept { return watches_.size(); }

 private:
  struct Watch {
    std::vector<std::string> keys;
    std::size_t pending = 0;  // keys still awaited in waiting_
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  void on_key_created(const std::string& key);
  void park(WatchId id, Watch& watch);
  void store_value(Bytes& held, std::span<const std::uint8_t> value);

  // Heterogeneous lookup: requests are served from string_views into the input buffer.
  std::unordered_map<std::string, Bytes, KeyHash, std::equal_to<>> map_;
  std::size_t key_bytes_ = 0;
  std::size_t stored_bytes_ = 0;
  std::uint64_t key_generation_ = 0;
  mutable std::vector<std::string> sorted_keys_;  // cache for keys()
  mutable bool sorted_valid_ = false;
  std::unordered_map<WatchId, Watch> watches_;
  std::unordered_map<std::string, std::unordered_set<WatchId>> waiting_;  // key -> watches
  std::vector<WatchId> ready_;
  WatchId next_id_ = 1;
};

// Parses a stored counter ("-12"); nullopt if it is not a decimal int64.
std::optional<std::int64_t> parse_counter(const Bytes& value);
// current + delta, or nullopt when the sum leaves int64 (counters never wrap silently).
std::optional<std::int64_t> checked_counter_add(std::int64_t current, std::int64_t delta) noexcept;
// "add('k', 5): the counter holds 9223372036854775806; adding 5 overflows int64 ..." (one wording
// for every store).
std::string counter_overflow_message(const std::string& key, std::int64_t current,
                                     std::int64_t delta);

}  // namespace chorus::store
