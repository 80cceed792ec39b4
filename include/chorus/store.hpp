// SPDX-License-Identifier: BSD-3-Clause
// Store: the key-value store that bootstraps process groups, and the in-process, prefix and
// file-system implementations. TcpStore is in <chorus/tcp_store.hpp>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/export.hpp>
#include <chorus/options.hpp>

namespace chorus {

using Bytes = std::vector<std::uint8_t>;
inline Bytes to_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

// What Store::get_with returns: the awaited key's value, and each other key's value (nullopt
// where it does not exist), in the order asked.
struct KeyWithOthers {
  Bytes value;
  std::vector<std::optional<Bytes>> others;
};

// Bootstrap key-value store. Every method is thread-safe. Waiting methods (get, wait,
// multi_get) take an optional timeout: unset means default_timeout(). Past it they throw
// TimeoutError naming the keys still missing. Errors of the store itself throw StoreError;
// lost connections throw NetworkError.
class CHORUS_API Store {
 public:
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets key to value, replacing any old value; wakes every waiter on key.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Value of key; waits until the key exists or the timeout passes.
  virtual Bytes get(const std::string& key, std::optional<Duration> timeout = {}) = 0;
  // Adds delta to the integer counter at key (a missing key counts as 0) and returns the new
  // value. Atomic across every client. Throws StoreError if the key holds a non-integer.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Stores desired iff the current value equals expected (a missing key equals an empty
  // expected). Returns the value stored afterwards (desired on success, the current value
  // otherwise).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = {}) = 0;
  // True if every key exists now. Never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; false if it was absent.
  virtual bool delete_key(const std::string& key) = 0;
  // Number of keys in the store (for a PrefixStore: in the whole underlying store).
  virtual std::int64_t num_keys() = 0;

  // Defaults built on the calls above; TcpStore overrides them with one round trip each.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                                       std::optional<Duration> timeout = {});
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values);
  // Appends value to key's value (creating it if absent).
  virtual void append(const std::string& key, const Bytes& value);
  // Waits until key exists (as get), then returns its value and, read at that moment, the value
  // of each of `others` or nullopt where one does not exist: a record that announces others (a
  // formation's outcome, and its members' addresses) and those others in one round trip on a
  // TcpStore. The default reads `others` right after key, one by one.
  virtual KeyWithOthers get_with(const std::string& key, const std::vector<std::string>& others,
                                 std::optional<Duration> timeout = {});

  // Convenience overloads for text values.
  void set(const std::string& key, std::string_view value) { set(key, to_bytes(value)); }
  std::string get_string(const std::string& key, std::optional<Duration> timeout = {}) {
    return to_string(get(key, timeout));
  }

  // Host (name or address) of the server behind this store, when there is one: TcpStore's
  // host, forwarded by PrefixStore; "127.0.0.1" for the in-process HashStore; none for
  // FileStore. The tcp backend binds the local address that routes to it, so peers that reach
  // the store can reach each other (override with CHORUS_SOCKET_IFNAME).
  virtual std::optional<std::string> server_host() const { return std::nullopt; }

  Duration default_timeout() const noexcept { return default_timeout_; }
  void set_default_timeout(Duration timeout) noexcept { default_timeout_ = timeout; }

 protected:
  // Unset: CHORUS_TIMEOUT if set, else kDefaultTimeout.
  explicit Store(std::optional<Duration> default_timeout = {});
  Duration resolve_timeout(std::optional<Duration> timeout) const noexcept {
    return timeout ? *timeout : default_timeout_;
  }

 private:
  Duration default_timeout_;
};

// Every key is seen through "<prefix>/" on base. Used to give each group its own namespace.
// Shares base (kept alive by the returned store); thread-safe as base is. Throws InvalidArgument
// if base is null.
CHORUS_API std::shared_ptr<Store> make_prefix_store(std::string prefix,
                                                    std::shared_ptr<Store> base);
// In-process store (threads of one process): a map, a mutex and a condition variable; waiters
// are woken by the set itself. Never throws except TimeoutError from waiting calls.
CHORUS_API std::shared_ptr<Store> make_hash_store(std::optional<Duration> default_timeout = {});
// Store in a directory on a filesystem shared by every process (e.g. NFS on a Slurm cluster).
// Safe across processes and hosts: writers hold an flock on <directory>/.lock and publish each
// value with an atomic rename; readers never see a partial value. Waiting calls poll (0.5 ms
// growing to 50 ms), since nothing can wake them across hosts. The directory is created if
// missing; filesystem failures throw StoreError naming the path and errno.
CHORUS_API std::shared_ptr<Store> make_file_store(const std::string& directory,
                                                  std::optional<Duration> default_timeout = {});

}  // namespace chorus
