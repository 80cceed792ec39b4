// SPDX-License-Identifier: BSD-3-Clause
// One launch attempt: fork/exec the local ranks, relay their output line by line with a rank
// prefix, and stop them all (SIGTERM, then SIGKILL after the grace period) when one fails or
// chorusrun itself is signalled.
//
// Process model. Each rank is the leader of its own process group, so a terminal's Ctrl-C
// reaches chorusrun only (which forwards it once) and kill(-pgid) also reaches whatever the
// rank started. Each rank has PR_SET_PDEATHSIG = SIGKILL, set before exec and re-checked with
// getppid(), so it dies with chorusrun even when chorusrun is SIGKILLed. chorusrun is a child
// subreaper, so orphans of a rank are reparented to it and reaped rather than left as zombies.
// chorusrun has threads (the store server), so between fork and exec a child only makes
// async-signal-safe calls on data prepared before the fork.
#include "chorusrun_supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace chorusrun {
namespace {

using Clock = std::chrono::steady_clock;

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // console gone (EPIPE): the ranks' output is dropped, the run goes on
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const std::string& text) { write_all(2, "chorusrun: " + text + "\n"); }

// One output stream of one rank.
struct Stream {
  int fd = -1;        // read end of the pipe; -1 once closed
  int console = 1;    // 1 or 2; -1: not shown (redirected to the log only)
  int log = -1;       // log file or -1
  std::string partial;  // bytes after the last newline
};

struct Child {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out;
  Stream err;
};

class Relay {
 public:
  explicit Relay(bool prefix) : prefix_(prefix) {}

  // Emits every complete line of `data` (and the rest at EOF).
  void feed(Child& c, Stream& s, std::string_view data) {
    s.partial.append(data);
    std::size_t start = 0;
    for (;;) {
      const auto nl = s.partial.find('\n', start);
      if (nl == std::string::npos) {
        break;
      }
      emit(c, s, std::string_view(s.partial).substr(start, nl + 1 - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() > kMaxLine) {  // a very long line without newline: cut it
      s.partial.push_back('\n');
      emit(c, s, s.partial);
      s.partial.clear();
    }
  }
  void finish(Child& c, Stream& s) {
    if (!s.partial.empty()) {
      s.partial.push_back('\n');
      emit(c, s, s.partial);
      s.partial.clear();
    }
  }

 private:
  static constexpr std::size_t kMaxLine = 64 * 1024;
  void emit(const Child& c, const Stream& s, std::string_view line) {
    if (s.log >= 0) {
      write_all(s.log, line);
    }
    if (s.console < 0) {
      return;
    }
    if (prefix_) {
      std::string out = "[rank " + std::to_string(c.rank) + "] ";
      out.append(line);
      write_all(s.console, out);  // one write per line: lines of ranks never interleave
    } else {
      write_all(s.console, line);
    }
  }
  bool prefix_;
};

// Reads what is in the pipe now; closes it at EOF. Returns false once closed.
bool drain(Relay& relay, Child& c, Stream& s) {
  char buf[65536];
  while (s.fd >= 0) {
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      relay.feed(c, s, std::string_view(buf, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    }
    relay.finish(c, s);  // EOF or error
    ::close(s.fd);
    s.fd = -1;
  }
  return false;
}

void close_stream(Relay& relay, Child& c, Stream& s) {
  if (s.fd >= 0) {
    drain(relay, c, s);
  }
  if (s.fd >= 0) {
    relay.finish(c, s);
    ::close(s.fd);
    s.fd = -1;
  }
  if (s.log >= 0) {
    ::close(s.log);
    s.log = -1;
  }
}

bool make_dirs(const std::string& path) {
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return false;
    }
  }
  return true;
}

int open_log(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    say("cannot open " + path + ": " + std::strerror(errno) + " (logging to the console only)");
  }
  return fd;
}

// The variables chorusrun sets for one rank, on top of base_env.
std::vector<std::string> rank_env(const LaunchPlan& plan, int attempt, int rank, int local_rank) {
  const RunArgs& a = plan.args;
  const int world = a.nnodes * a.nproc_per_node;
  std::vector<std::string> env = plan.base_env;
  const bool v6 = plan.store_host.find(':') != std::string::npos;
  const std::string store_addr = (v6 ? "[" + plan.store_host + "]" : plan.store_host) + ":" +
                                 std::to_string(plan.store_port);
  auto set = [&](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(world));
  set("LOCAL_RANK", std::to_string(local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(a.nproc_per_node));
  set("GROUP_RANK", std::to_string(a.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(a.nnodes));
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", std::to_string(world));
  set("ROLE_NAME", "default");
  set("MASTER_ADDR", plan.store_host);
  set("MASTER_PORT", std::to_string(plan.store_port));
  set("CHORUS_STORE_ADDR", store_addr);
  set("CHORUS_LAUNCHER", "chorusrun");
  set("CHORUS_RESTART_COUNT", std::to_string(attempt));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts));
  return env;
}

// Closes every descriptor from 3 up (async-signal-safe).
void close_from_3() {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) {
    return;
  }
#endif
  for (int fd = 3; fd < 65536; ++fd) {
    ::close(fd);
  }
}

[[noreturn]] void child_exec(const char* path, char* const* argv, char* const* envp, int out_w,
                             int err_w, int null_fd, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {  // chorusrun died before the death signal was armed
    ::_exit(128 + SIGKILL);
  }
  ::dup2(null_fd, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  close_from_3();
  sigset_t all;
  ::sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::execve(path, argv, envp);
  static const char msg[] = "chorusrun: exec failed for the program\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
  ::_exit(127);
}

class Attempt {
 public:
  Attempt(const LaunchPlan& plan, int attempt, int signal_fd)
      : plan_(plan), attempt_(attempt), signal_fd_(signal_fd), relay_(plan.args.prefix_output) {}

  AttemptResult run() {
    if (!start_all()) {
      stop_all(SIGTERM);
    }
    loop();
    finish();
    return result_;
  }

 private:
  bool start_all() {
    const RunArgs& a = plan_.args;
    const int tee = a.tee < 0 ? kBoth : a.tee;
    const int redirects = a.redirects < 0 ? kNone : a.redirects;
    (void)tee;  // with a log dir every stream is logged; tee only asks for the log dir
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    children_.resize(static_cast<std::size_t>(a.nproc_per_node));
    bool ok = true;
    for (int local = 0; local < a.nproc_per_node && ok; ++local) {
      Child& c = children_[static_cast<std::size_t>(local)];
      c.local_rank = local;
      c.rank = a.node_rank * a.nproc_per_node + local;
      c.out.console = (redirects & kStdout) ? -1 : 1;
      c.err.console = (redirects & kStderr) ? -1 : 2;
      if (!plan_.log_dir.empty()) {
        const std::string dir =
            plan_.log_dir + "/attempt_" + std::to_string(attempt_) + "/" + std::to_string(c.rank);
        if (make_dirs(dir)) {
          c.out.log = open_log(dir, "stdout.log");
          c.err.log = open_log(dir, "stderr.log");
        } else {
          say("cannot create " + dir + ": " + std::strerror(errno));
        }
      }
      ok = spawn(c, null_fd);
      if (!ok) {
        result_.kind = AttemptResult::Kind::rank_failed;
        result_.rank = c.rank;
        result_.local_rank = c.local_rank;
        result_.exit_code = 1;
      }
    }
    if (null_fd >= 0) {
      ::close(null_fd);
    }
    return ok;
  }

  bool spawn(Child& c, int null_fd) {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      say(std::string("pipe failed: ") + std::strerror(errno));
      return false;
    }
    // Everything the child needs, built before fork (the child may not allocate).
    std::vector<std::string> env = rank_env(plan_, attempt_, c.rank, c.local_rank);
    std::vector<char*> envp;
    for (auto& e : env) {
      envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    std::vector<std::string> args = plan_.args.program;
    std::vector<char*> argv;
    for (auto& s : args) {
      argv.push_back(s.data());
    }
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      say(std::string("fork failed: ") + std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]}) {
        ::close(fd);
      }
      return false;
    }
    if (pid == 0) {
      child_exec(plan_.program_path.c_str(), argv.data(), envp.data(), out[1], err[1], null_fd,
                 parent);
    }
    ::setpgid(pid, pid);  // also here, so kill(-pid) works before the child ran
    ::close(out[1]);
    ::close(err[1]);
    for (int fd : {out[0], err[0]}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    c.pid = pid;
    c.running = true;
    c.out.fd = out[0];
    c.err.fd = err[0];
    return true;
  }

  int running_count() const {
    int n = 0;
    for (const auto& c : children_) {
      n += c.running ? 1 : 0;
    }
    return n;
  }

  // Sends sig to every rank's process group (ranks that exited may have left children there).
  void signal_groups(int sig) {
    for (const auto& c : children_) {
      if (c.pid > 0) {
        ::kill(-c.pid, sig);
      }
    }
  }

  void stop_all(int sig) {
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(plan_.args.kill_timeout_s));
    }
    signal_groups(sig);
  }

  void on_child_exit(Child& c, int status) {
    c.running = false;
    c.status = status;
    // What it wrote before exiting is in the pipe already: show it before our verdict.
    drain(relay_, c, c.out);
    drain(relay_, c, c.err);
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!failed || stopping_) {
      return;
    }
    result_.kind = AttemptResult::Kind::rank_failed;
    result_.rank = c.rank;
    result_.local_rank = c.local_rank;
    result_.pid = c.pid;
    std::string how;
    if (WIFEXITED(status)) {
      result_.exit_code = WEXITSTATUS(status);
      how = "exited with code " + std::to_string(result_.exit_code);
    } else {
      result_.signal = WTERMSIG(status);
      how = "was killed by signal " + std::to_string(result_.signal) + " (" +
            signal_name(result_.signal) + ")";
    }
    const int others = running_count();
    std::string msg = "rank " + std::to_string(c.rank) + " (local rank " +
                      std::to_string(c.local_rank) + ", pid " + std::to_string(c.pid) + ") " + how;
    if (others > 0) {
      char grace[32];
      std::snprintf(grace, sizeof(grace), "%g", plan_.args.kill_timeout_s);
      msg += "; stopping the other " + std::to_string(others) + " rank" + (others > 1 ? "s" : "") +
             " (SIGTERM, then SIGKILL after " + grace + " s)";
    }
    say(msg);
    stop_all(SIGTERM);
  }

  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) {
        return;
      }
      for (auto& c : children_) {
        if (c.pid == pid && c.running) {
          on_child_exit(c, status);
        }
      }
      // Any other pid is an orphan of a rank, reparented to us (subreaper): reaped, ignored.
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) {
      reap();
      return;
    }
    if (result_.interrupt_signal == 0) {
      // The first signal is forwarded as is (and rules out a restart); a second one kills.
      if (result_.kind == AttemptResult::Kind::ok) {
        result_.kind = AttemptResult::Kind::interrupted;
      }
      result_.interrupt_signal = sig;
      say("got " + signal_name(sig) + "; forwarding it to " + std::to_string(running_count()) +
          " rank(s)");
      stopping_ = false;  // restart the grace period from now
      stop_all(sig);
    } else {
      say("got " + signal_name(sig) + " again; killing every rank now");
      signal_groups(SIGKILL);
      killed_ = true;
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, Stream*>> owners;
    while (running_count() > 0) {
      fds.clear();
      owners.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      owners.emplace_back(nullptr, nullptr);
      for (auto& c : children_) {
        for (Stream* s : {&c.out, &c.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            owners.emplace_back(&c, s);
          }
        }
      }
      int timeout_ms = -1;
      if (stopping_ && !killed_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - Clock::now());
        timeout_ms = static_cast<int>(std::max<long long>(0, left.count()));
      }
      const int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        say(std::string("poll failed: ") + std::strerror(errno) + "; killing every rank");
        signal_groups(SIGKILL);
        killed_ = true;
      }
      if (stopping_ && !killed_ && Clock::now() >= kill_at_) {
        if (running_count() > 0) {
          say("ranks still running after the grace period: sending SIGKILL");
        }
        signal_groups(SIGKILL);
        killed_ = true;
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) {
          drain(relay_, *owners[i].first, *owners[i].second);
        }
      }
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info[16];
        const ssize_t got = ::read(signal_fd_, info, sizeof(info));
        for (ssize_t k = 0; k < got / static_cast<ssize_t>(sizeof(signalfd_siginfo)); ++k) {
          on_signal(static_cast<int>(info[k].ssi_signo));
        }
      }
    }
  }

  // Every rank was reaped: take what is left in the pipes (a rank's own children may still
  // hold them open, so never wait for EOF), kill what is left in the ranks' process groups,
  // and reap those orphans.
  void finish() {
    for (auto& c : children_) {
      close_stream(relay_, c, c.out);
      close_stream(relay_, c, c.err);
    }
    signal_groups(SIGKILL);
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        continue;
      }
      if (pid < 0) {
        break;  // ECHILD: nothing left
      }
      pollfd p{signal_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        signalfd_siginfo info[16];
        const ssize_t got = ::read(signal_fd_, info, sizeof(info));
        for (ssize_t k = 0; k < got / static_cast<ssize_t>(sizeof(signalfd_siginfo)); ++k) {
          const int sig = static_cast<int>(info[k].ssi_signo);
          if (sig != SIGCHLD && result_.interrupt_signal == 0) {
            result_.interrupt_signal = sig;
            if (result_.kind == AttemptResult::Kind::ok) {
              result_.kind = AttemptResult::Kind::interrupted;
            }
          }
        }
      }
    }
  }

  const LaunchPlan& plan_;
  int attempt_;
  int signal_fd_;
  Relay relay_;
  std::vector<Child> children_;
  AttemptResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_{};
};

}  // namespace

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig)) {
    return std::string("SIG") + abbrev;
  }
  return "signal " + std::to_string(sig);
}

int exit_status_of(const AttemptResult& result) {
  switch (result.kind) {
    case AttemptResult::Kind::ok:
      return 0;
    case AttemptResult::Kind::interrupted:
      return 128 + result.interrupt_signal;
    case AttemptResult::Kind::rank_failed:
      return result.signal != 0 ? 128 + result.signal : result.exit_code;
  }
  return 1;
}

AttemptResult run_attempt(const LaunchPlan& plan, int attempt, int signal_fd) {
  Attempt a(plan, attempt, signal_fd);
  return a.run();
}

}  // namespace chorusrun
