// SPDX-License-Identifier: BSD-3-Clause
#include "core/trace_dump.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/logging.hpp"

namespace chorus::trace {
namespace {

constexpr std::size_t kDefaultBufferEntries = 2048;
constexpr long long kMaxBufferEntries = 1 << 24;

// Every registered recorder of this process. Never destroyed: the SIGUSR1 thread and failure
// paths may run while static destructors do.
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<FlightRecorder>> recorders;  // guarded by mu
  int wake_fd[2] = {-1, -1};                             // SIGUSR1 -> dumper thread
  bool signal_checked = false;                           // guarded by mu
  bool dumper_running = false;                           // guarded by mu
};

Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// Async-signal-safe: only write(2) on a pipe whose descriptor is fixed before the handler is
// installed.
void on_sigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const auto n = ::write(registry().wake_fd[1], &byte, 1);
  errno = saved;
}

void dumper_loop(int fd) {
  char buf[64];
  for (;;) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    dump_all("SIGUSR1");
  }
}

// After fork() only the calling thread exists: the child starts its own dumper on its next
// registration (the pipe stays shared with the parent otherwise).
void forget_dumper_in_child() {
  Registry& r = registry();
  new (&r.mu) std::mutex();
  if (r.wake_fd[0] >= 0) {
    ::close(r.wake_fd[0]);
    ::close(r.wake_fd[1]);
    r.wake_fd[0] = r.wake_fd[1] = -1;
  }
  r.dumper_running = false;
  r.signal_checked = false;
  // The child's handler (inherited) must not write into a closed or reused descriptor.
  struct sigaction current {};
  if (::sigaction(SIGUSR1, nullptr, &current) == 0 && current.sa_handler == on_sigusr1) {
    ::signal(SIGUSR1, SIG_DFL);
  }
}

// Called with registry().mu held.
void install_sigusr1_once(Registry& r) {
  if (r.signal_checked) {
    return;
  }
  r.signal_checked = true;
  static std::once_flag atfork;
  std::call_once(atfork, [] { ::pthread_atfork(nullptr, nullptr, forget_dumper_in_child); });
  struct sigaction current {};
  if (::sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO) != 0) {
    CHORUS_INFO(trace, "SIGUSR1 has a handler already: flight recorder dumps only on failures");
    return;
  }
  if (::pipe2(r.wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    CHORUS_WARN(trace, "no SIGUSR1 dumps: pipe2 failed: {}", std::strerror(errno));
    return;
  }
  // The reading end blocks: the dumper thread sleeps in read().
  ::fcntl(r.wake_fd[0], F_SETFL, 0);
  try {
    std::thread(dumper_loop, r.wake_fd[0]).detach();
  } catch (const std::exception& e) {
    CHORUS_WARN(trace, "no SIGUSR1 dumps: cannot start the dumper thread: {}", e.what());
    return;
  }
  r.dumper_running = true;
  struct sigaction action {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, nullptr);
}

std::string sanitized(std::string text) {
  for (char& c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      c = '_';
    }
  }
  return text.substr(0, 64);
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    return "unknown-host";
  }
  return host;
}

std::string file_stem() {
  if (auto rank = env::get("RANK")) {
    return "rank" + sanitized(*rank);
  }
  return fmt::format("pid{}", ::getpid());
}

// mkdir -p with mode 0700 for the parts it creates.
bool make_directories(const std::string& path) {
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) {
      continue;
    }
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return false;
    }
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Writes `name` in the directory `dir_fd` (opened and checked once, so a path swapped
// meanwhile cannot redirect the write).
bool write_file_atomically(int dir_fd, const std::string& name, const std::string& text) {
  const std::string tmp = fmt::format("{}.{}.tmp", name, ::getpid());
  const int fd =
      ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return false;
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      ::close(fd);
      ::unlinkat(dir_fd, tmp.c_str(), 0);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 || ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  return true;
}

nlohmann::json entry_json(const TraceEntry& e) {
  nlohmann::json j = {
      {"record", e.record},
      {"seq", e.seq},
      {"p2p", e.p2p},
      {"op", e.op},
      {"dtype", to_string(e.dtype)},
      {"count", e.count},
      {"bytes", e.bytes},
      {"algorithm", e.algorithm},
      {"state", to_string(e.state)},
      {"issued_us", e.issued_us},
      {"started_us", e.started_us},
      {"ended_us", e.ended_us},
  };
  j["root"] = e.root >= 0 ? nlohmann::json(e.root) : nlohmann::json(nullptr);
  j["peer"] = e.peer >= 0 ? nlohmann::json(e.peer) : nlohmann::json(nullptr);
  if (e.p2p) {
    j["tag"] = e.tag;
  }
  if (!e.error.empty()) {
    j["error"] = e.error;
  }
  return j;
}

}  // namespace

int open_dump_directory(const std::string& dir, bool must_be_private, std::string& why) {
  if (!make_directories(dir)) {
    why = fmt::format("cannot create it: {}", std::strerror(errno));
    return -1;
  }
  // The default directory sits in a temp directory every user can write: whoever made it first
  // owns it. Not following a symlink there, and checking the owner and mode of what was
  // opened (not of the path), leaves no window for another user to slip in a directory of
  // theirs.
  const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (must_be_private ? O_NOFOLLOW : 0);
  const int fd = ::open(dir.c_str(), flags);
  if (fd < 0) {
    why = errno == ELOOP || errno == ENOTDIR
              ? std::string("it is a symbolic link, not a directory")
              : fmt::format("cannot open it: {}", std::strerror(errno));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = fmt::format("cannot stat it: {}", std::strerror(errno));
  } else if (must_be_private && st.st_uid != ::geteuid()) {
    why = fmt::format("it belongs to uid {}, not to this process's uid {}", st.st_uid, ::geteuid());
  } else if (must_be_private && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = fmt::format("it is writable by {} (mode {:04o})",
                      (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group", st.st_mode & 07777);
  } else {
    return fd;
  }
  ::close(fd);
  return -1;
}

std::size_t buffer_entries() {
  const auto value = env::get_int("CHORUS_TRACE_BUFFER", 0, kMaxBufferEntries, "you");
  return value ? static_cast<std::size_t>(*value) : kDefaultBufferEntries;
}

std::string refused_default_message(const std::string& dir, const std::string& why) {
  return fmt::format(
      "flight recorder: not writing dumps into {}: {}, so another user could replace or remove "
      "them before chorus-trace reads them. Set CHORUS_TRACE_DIR to a directory of your own, "
      "or remove that one if it is a leftover of yours (it is made again, private, at the next "
      "dump)",
      dir, why);
}

std::string directory() {
  if (auto dir = env::get("CHORUS_TRACE_DIR")) {
    return *dir;
  }
  const std::string tmp = env::get("TMPDIR").value_or("/tmp");
  auto run = env::get("CHORUS_RUN_ID");
  if (!run) {
    run = env::get("TORCHELASTIC_RUN_ID");
  }
  return fmt::format("{}/chorus-trace-{}-{}", tmp, ::getuid(), sanitized(run.value_or("default")));
}

void register_recorder(const std::shared_ptr<FlightRecorder>& recorder) {
  if (!recorder || !recorder->enabled()) {
    return;
  }
  Registry& r = registry();
  const std::lock_guard lock(r.mu);
  std::erase_if(r.recorders, [](const auto& w) { return w.expired(); });
  r.recorders.push_back(recorder);
  install_sigusr1_once(r);
}

std::string to_json(const std::vector<TraceSnapshot>& groups, const std::string& reason) {
  nlohmann::json doc = {
      {"format", "chorus-flight-recorder"},
      {"version", 1},
      {"reason", reason},
      {"dumped_us", trace_now_us()},
      {"process",
       {{"pid", ::getpid()},
        {"host", host_name()},
        {"rank", env::get("RANK").value_or("")},
        {"run_id",
         env::get("CHORUS_RUN_ID").value_or(env::get("TORCHELASTIC_RUN_ID").value_or(""))}}},
  };
  nlohmann::json out_groups = nlohmann::json::array();
  for (const TraceSnapshot& s : groups) {
    nlohmann::json ops = nlohmann::json::array();
    for (const TraceEntry& e : s.entries) {
      ops.push_back(entry_json(e));
    }
    nlohmann::json g = {
        {"name", s.group.name},  {"backend", s.group.backend}, {"rank", s.group.rank},
        {"size", s.group.size},  {"capacity", s.capacity},     {"recorded", s.recorded},
        {"failure", s.failure},  {"failure_us", s.failure_us}, {"failure_peers", s.failure_peers},
        {"ops", std::move(ops)},
    };
    out_groups.push_back(std::move(g));
  }
  doc["groups"] = std::move(out_groups);
  return doc.dump(1);
}

std::string dump_all(const std::string& reason) noexcept {
  try {
    std::vector<TraceSnapshot> snapshots;
    {
      Registry& r = registry();
      const std::lock_guard lock(r.mu);
      for (const auto& weak : r.recorders) {
        if (auto rec = weak.lock()) {
          snapshots.push_back(rec->snapshot());
        }
      }
    }
    if (snapshots.empty()) {
      return {};
    }
    // One dump at a time per process: a failure and a SIGUSR1 may race for the same file.
    static auto* dump_mu = new std::mutex;
    const std::lock_guard dumping(*dump_mu);
    const std::string dir = directory();
    const bool chosen = env::get("CHORUS_TRACE_DIR").has_value();
    std::string why;
    const int dir_fd = open_dump_directory(dir, !chosen, why);
    if (dir_fd < 0) {
      // Once per directory and process: a SIGUSR1 loop must not repeat it.
      static auto* refused = new std::string;
      if (*refused != dir) {
        *refused = dir;
        CHORUS_WARN(trace, "{}",
                    chosen ? fmt::format("flight recorder: no dump written to {} "
                                         "(CHORUS_TRACE_DIR): {}",
                                         dir, why)
                           : refused_default_message(dir, why));
      }
      return {};
    }
    const std::string name = file_stem() + ".json";
    const std::string path = fmt::format("{}/{}", dir, name);
    const bool written = write_file_atomically(dir_fd, name, to_json(snapshots, reason));
    const int saved = errno;
    ::close(dir_fd);
    if (!written) {
      CHORUS_WARN(trace, "flight recorder: cannot write {}: {}", path, std::strerror(saved));
      return {};
    }
    CHORUS_WARN(trace, "flight recorder ({}): wrote {}; read every rank's with chorus-trace {}",
                reason, path, dir);
    return path;
  } catch (const std::exception& e) {
    CHORUS_WARN(trace, "flight recorder: dump failed: {}", e.what());
  } catch (...) {
    CHORUS_WARN(trace, "flight recorder: dump failed");
  }
  return {};
}

}  // namespace chorus::trace
