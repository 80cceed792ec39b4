// SPDX-License-Identifier: BSD-3-Clause
// FileStore: a Store in a directory on a filesystem shared by every process (NFS, Lustre...).
// Each key is one file. Writers take an exclusive flock on "<dir>/.lock", write a temporary
// file and rename() it over the key's file, so readers (which take no lock) always see a whole
// value. There is no server to wake waiters, so get/wait poll with capped exponential backoff.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "core/format.hpp"
#include "net/socket.hpp"
#include "store/kv_table.hpp"
#include "store/missing_keys.hpp"

namespace chorus {
namespace {

constexpr std::size_t kMaxPlainName = 180;  // file names stay far below NAME_MAX (255)
constexpr const char* kKeyPrefix = "k.";

[[noreturn]] void fail_fs(const std::string& what, const std::string& path, int err) {
  ErrorContext ctx;
  ctx.op = "store.file";
  ctx.os_error = err;
  throw StoreError(fmt::format("FileStore: {} '{}' failed: {}; check that the directory exists, "
                               "is writable and is on a filesystem every process can reach",
                               what, path, net::errno_name(err)),
                   ctx);
}

// Escapes a key into a file name: [A-Za-z0-9_-] kept, every other byte as %XX. Names that would
// be too long become a 64-bit FNV-1a hash plus a readable prefix (collisions: ~2^-64 per pair).
std::string file_name_for(const std::string& key) {
  std::string name = kKeyPrefix;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-') {
      name += static_cast<char>(c);
    } else {
      name += fmt::format("%{:02X}", c);
    }
  }
  if (name.size() <= kMaxPlainName) {
    return name;
  }
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) {
    h = (h ^ c) * 1099511628211ull;
  }
  return fmt::format("{}~{:016x}", name.substr(0, 100), h);
}

class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fail_fs("opening lock file", path, errno);
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        ::close(fd_);
        fail_fs("locking", path, err);
      }
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

class FileStore final : public Store {
 public:
  FileStore(std::string dir, std::optional<Duration> timeout)
      : Store(timeout), dir_(std::move(dir)) {
    make_dirs(dir_);
    lock_path_ = dir_ + "/.lock";
  }

  void set(const std::string& key, const Bytes& value) override {
    FileLock lock(lock_path_);
    write_key(key, value);
  }

  Bytes get(const std::string& key, std::optional<Duration> timeout) override {
    const Duration t = resolve_timeout(timeout);
    Bytes value;
    poll_until(Deadline::after(t), t, "get", {key}, [&] { return read_key(key, value); });
    return value;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    FileLock lock(lock_path_);
    Bytes current;
    std::int64_t value = 0;
    if (read_key(key, current)) {
      auto parsed = store::parse_counter(current);
      if (!parsed) {
        throw StoreError(
            fmt::format("FileStore add('{}'): the key holds a value that is not an "
                        "integer counter; use a key only as a counter",
                        key));
      }
      value = *parsed;
    }
    const auto next = store::checked_counter_add(value, delta);
    if (!next) {
      throw StoreError("FileStore " + store::counter_overflow_message(key, value, delta));
    }
    write_key(key, to_bytes(std::to_string(*next)));
    return *next;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    FileLock lock(lock_path_);
    Bytes current;
    if (!read_key(key, current)) {
      if (expected.empty()) {
        write_key(key, desired);
        return desired;
      }
      return {};
    }
    if (current == expected) {
      write_key(key, desired);
      return desired;
    }
    return current;
  }

  void wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) override {
    const Duration t = resolve_timeout(timeout);
    poll_until(Deadline::after(t), t, "wait", keys, [&] { return check(keys); });
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      struct stat st {};
      if (::stat(path_for(k).c_str(), &st) != 0) {
        return false;
      }
    }
    return true;
  }

  bool delete_key(const std::string& key) override {
    FileLock lock(lock_path_);
    const std::string path = path_for(key);
    if (::unlink(path.c_str()) == 0) {
      return true;
    }
    if (errno == ENOENT) {
      return false;
    }
    fail_fs("deleting", path, errno);
  }

  std::int64_t num_keys() override {
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) {
      fail_fs("listing", dir_, errno);
    }
    std::int64_t n = 0;
    while (dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, kKeyPrefix, 2) == 0) {
        ++n;
      }
    }
    ::closedir(d);
    return n;
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size()) {
      throw InvalidArgument(fmt::format("multi_set: {} keys but {} values; pass one value per key",
                                        keys.size(), values.size()));
    }
    FileLock lock(lock_path_);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      write_key(keys[i], values[i]);
    }
  }

  void append(const std::string& key, const Bytes& value) override {
    FileLock lock(lock_path_);
    Bytes current;
    (void)read_key(key, current);
    current.insert(current.end(), value.begin(), value.end());
    write_key(key, current);
  }

 private:
  static void make_dirs(const std::string& dir) {
    std::string path;
    std::size_t pos = 0;
    while (pos != std::string::npos) {
      pos = dir.find('/', pos + 1);
      path = dir.substr(0, pos);
      if (!path.empty() && ::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        fail_fs("creating directory", path, errno);
      }
    }
  }

  std::string path_for(const std::string& key) const { return dir_ + "/" + file_name_for(key); }

  // True and the whole value if the key's file exists.
  bool read_key(const std::string& key, Bytes& out) const {
    const std::string path = path_for(key);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return false;
      }
      fail_fs("opening", path, errno);
    }
    out.clear();
    std::uint8_t buf[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        out.insert(out.end(), buf, buf + n);
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        const int err = errno;
        ::close(fd);
        fail_fs("reading", path, err);
      }
    }
    ::close(fd);
    return true;
  }

  // Caller holds the directory lock.
  void write_key(const std::string& key, const Bytes& value) {
    static std::atomic<std::uint64_t> counter{0};
    const std::string tmp = fmt::format("{}/.tmp.{}.{}", dir_, ::getpid(), counter.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      fail_fs("creating", tmp, errno);
    }
    std::size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail_fs("writing", tmp, err);
      }
      done += static_cast<std::size_t>(n);
    }
    // close() is where NFS reports write errors (close-to-open consistency).
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      fail_fs("closing", tmp, err);
    }
    const std::string path = path_for(key);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      fail_fs("renaming into", path, err);
    }
  }

  template <class Ready>
  void poll_until(Deadline deadline, Duration timeout, const char* op,
                  const std::vector<std::string>& keys, Ready ready) {
    auto backoff = std::chrono::microseconds(500);
    for (;;) {
      if (ready()) {
        return;
      }
      const auto left = deadline.remaining();
      if (left <= Duration::zero()) {
        break;
      }
      std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
          backoff, std::chrono::duration_cast<std::chrono::microseconds>(left)));
      backoff = std::min<std::chrono::microseconds>(backoff * 2, std::chrono::milliseconds(50));
    }
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!check({k})) {
        missing.push_back(k);
      }
    }
    store::throw_keys_timeout(fmt::format("FileStore {} in {}", op, dir_), op, timeout, missing,
                              "the process that sets them has not arrived, or does not see the "
                              "same directory");
  }

  std::string dir_;
  std::string lock_path_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& directory,
                                       std::optional<Duration> default_timeout) {
  if (directory.empty()) {
    throw InvalidArgument("make_file_store: empty directory; pass a path on a shared filesystem");
  }
  return std::make_shared<FileStore>(directory, default_timeout);
}

}  // namespace chorus
