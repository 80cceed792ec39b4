// SPDX-License-Identifier: BSD-3-Clause
// One launch attempt: start the local ranks (chorusrun_spawn), relay their output
// (chorusrun_relay), and stop them all (SIGTERM, then SIGKILL after the grace period) when one
// fails or chorusrun itself is signalled. chorusrun is a child subreaper, so orphans of a rank
// are reparented to it and reaped here rather than left as zombies.
#include "chorusrun_supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "chorusrun_relay.hpp"
#include "chorusrun_spawn.hpp"

namespace chorusrun {
namespace {

using Clock = std::chrono::steady_clock;

// How long ranks get to write their flight recorder dumps (chorus handles SIGUSR1 on a thread
// of its own: a few ms) before the SIGTERM of a failed attempt.
constexpr auto kDumpGrace = std::chrono::seconds(1);

// True if process pid catches SIGUSR1 (/proc/<pid>/status, SigCgt): a chorus rank does, and a
// program that does not would be killed by it, so only those that catch it are asked to dump.
bool catches_sigusr1(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (f == nullptr) {
    return false;
  }
  char line[256];
  unsigned long long mask = 0;
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "SigCgt: %llx", &mask) == 1) {
      found = true;
      break;
    }
  }
  std::fclose(f);
  return found && (mask & (1ULL << (SIGUSR1 - 1))) != 0;
}

class Attempt {
 public:
  Attempt(const LaunchPlan& plan, int attempt, int signal_fd, int job_end_fd, ElasticBudget* budget)
      : plan_(plan),
        attempt_(attempt),
        signal_fd_(signal_fd),
        job_end_fd_(job_end_fd),
        budget_(budget),
        relay_(plan.args.prefix) {}

  AttemptResult run() {
    if (!start_all()) {
      stop_all(SIGTERM);
    }
    loop();
    finish();
    if (lost_ > 0 && result_.kind == AttemptResult::Kind::ok) {
      say("--elastic: " + std::to_string(succeeded_) + " rank(s) finished, " +
          std::to_string(lost_) + " lost on the way");
    }
    return result_;
  }

 private:
  bool start_all() {
    const RunArgs& a = plan_.args;
    // With a log dir every stream is logged; --tee only asks for the log dir.
    const int redirects = a.redirects < 0 ? kNone : a.redirects;
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    children_.resize(static_cast<std::size_t>(a.nproc_per_node));
    bool ok = true;
    for (int local = 0; local < a.nproc_per_node && ok; ++local) {
      RankProcess& c = children_[static_cast<std::size_t>(local)];
      c.local_rank = local;
      c.rank = a.node_rank * a.nproc_per_node + local;
      c.out.console = (redirects & kStdout) ? -1 : 1;
      c.err.console = (redirects & kStderr) ? -1 : 2;
      if (!plan_.log_dir.empty()) {
        open_rank_logs(plan_.log_dir, attempt_, c);
      }
      ok = spawn_rank(plan_, attempt_, c, null_fd);
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

  // A failed attempt: ranks that catch SIGUSR1 (chorus ranks) first dump their flight
  // recorders, then everyone gets SIGTERM, then SIGKILL after the grace period.
  void stop_after_dumps() {
    int asked = 0;
    for (const auto& c : children_) {
      if (c.running && c.pid > 0 && catches_sigusr1(c.pid)) {
        ::kill(c.pid, SIGUSR1);
        ++asked;
      }
    }
    if (asked == 0) {
      stop_all(SIGTERM);
      return;
    }
    say("asked " + std::to_string(asked) + " rank(s) to dump their flight recorder (SIGUSR1)");
    stop_all(0);  // the grace period starts now; SIGTERM follows the dumps
    term_at_ = Clock::now() + kDumpGrace;
    term_pending_ = true;
  }

  void stop_all(int sig) {
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(plan_.args.kill_timeout_s));
    }
    if (sig != 0) {
      signal_groups(sig);
    }
  }

  void on_child_exit(RankProcess& c, int status) {
    c.running = false;
    c.status = status;
    // What it wrote before exiting is in the pipe already: show it before our verdict.
    relay_.drain(c.rank, c.out);
    relay_.drain(c.rank, c.err);
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!failed) {
      ++succeeded_;
    }
    if (!failed || stopping_) {
      return;
    }
    // --elastic --max-restarts: the slot's next process joins the running job.
    if (const int restart = budget_ != nullptr ? budget_->take_restart() : 0; restart > 0) {
      restart_as_joiner(c, status, restart);
      return;
    }
    // --elastic: tolerated while the job keeps enough ranks (running or finished).
    if (budget_ != nullptr) {
      const int world = plan_.args.nnodes * plan_.args.nproc_per_node;
      const int kept = world - budget_->record_loss();
      if (kept >= plan_.args.min_ranks) {
        ++lost_;
        say(describe_failure(exit_of(c, status)) + "; --elastic: the job goes on with " +
            std::to_string(kept) + " rank(s) (here " + std::to_string(running_count()) +
            " still running, " + std::to_string(succeeded_) + " finished; --min-ranks " +
            std::to_string(plan_.args.min_ranks) + ")");
        return;
      }
    }
    const AttemptResult ended = exit_of(c, status);
    result_.kind = AttemptResult::Kind::rank_failed;
    result_.rank = ended.rank;
    result_.local_rank = ended.local_rank;
    result_.pid = ended.pid;
    result_.exit_code = ended.exit_code;
    result_.signal = ended.signal;
    result_.failed_at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    const int others = running_count();
    std::string msg = describe_failure(result_);
    if (others > 0) {
      char grace[32];
      std::snprintf(grace, sizeof(grace), "%g", plan_.args.kill_timeout_s);
      msg += "; stopping the other " + std::to_string(others) + " rank" + (others > 1 ? "s" : "") +
             " (SIGTERM, then SIGKILL after " + grace + " s)";
    }
    say(msg);
    stop_after_dumps();
  }

  // A failed rank's slot starts a new process that joins the running job (CHORUS_ELASTIC_JOIN);
  // the survivors let it in with ProcessGroup::grow().
  void restart_as_joiner(RankProcess& c, int status, int restart) {
    say(describe_failure(exit_of(c, status)) +
        "; --elastic: restarting it as a joiner of the running job (restart " +
        std::to_string(restart) + " of --max-restarts " + std::to_string(plan_.args.max_restarts) +
        ")");
    relay_.close(c.rank, c.out);
    relay_.close(c.rank, c.err);
    ++c.rejoins;
    if (!plan_.log_dir.empty()) {
      open_rank_logs(plan_.log_dir, attempt_, c);
    }
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const bool started = spawn_rank(plan_, attempt_, c, null_fd);
    if (null_fd >= 0) {
      ::close(null_fd);
    }
    if (!started) {
      ++lost_;  // spawn_rank said why; the others go on as if it had not been restarted
    }
  }

  // How rank c ended, as describe_failure() names it.
  static AttemptResult exit_of(const RankProcess& c, int status) {
    AttemptResult r;
    r.rank = c.rank;
    r.local_rank = c.local_rank;
    r.pid = c.pid;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return r;
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
      stopping_ = false;      // restart the grace period from now
      term_pending_ = false;  // the user's signal replaces the SIGTERM of a failed attempt
      stop_all(sig);
    } else {
      say("got " + signal_name(sig) + " again; killing every rank now");
      signal_groups(SIGKILL);
      killed_ = true;
    }
  }

  // Another node ended this attempt (its rank failed, or it was signalled): stop ours.
  void on_job_end() {
    job_ended_ = true;
    if (result_.kind != AttemptResult::Kind::ok || running_count() == 0) {
      return;  // this node already has its own verdict
    }
    result_.kind = AttemptResult::Kind::job_ended;
    say("another node ended attempt " + std::to_string(attempt_) + "; stopping the " +
        std::to_string(running_count()) + " local rank(s)");
    stop_after_dumps();
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<RankProcess*, OutputStream*>> owners;
    while (running_count() > 0) {
      fds.clear();
      owners.clear();
      fds.push_back({signal_fd_, POLLIN, 0});
      owners.emplace_back(nullptr, nullptr);
      const bool watch_job_end = job_end_fd_ >= 0 && !job_ended_;
      if (watch_job_end) {
        fds.push_back({job_end_fd_, POLLIN, 0});
        owners.emplace_back(nullptr, nullptr);
      }
      const std::size_t first_stream = fds.size();
      for (auto& c : children_) {
        for (OutputStream* s : {&c.out, &c.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            owners.emplace_back(&c, s);
          }
        }
      }
      int timeout_ms = -1;
      if (stopping_ && !killed_) {
        const auto next = term_pending_ ? std::min(term_at_, kill_at_) : kill_at_;
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
        timeout_ms = static_cast<int>(std::max<long long>(0, left.count()));
      }
      const int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        say(std::string("poll failed: ") + std::strerror(errno) + "; killing every rank");
        signal_groups(SIGKILL);
        killed_ = true;
      }
      if (term_pending_ && Clock::now() >= term_at_) {
        term_pending_ = false;
        signal_groups(SIGTERM);
      }
      if (stopping_ && !killed_ && Clock::now() >= kill_at_) {
        if (running_count() > 0) {
          say("ranks still running after the grace period: sending SIGKILL");
        }
        signal_groups(SIGKILL);
        killed_ = true;
      }
      for (std::size_t i = first_stream; i < fds.size(); ++i) {
        if (fds[i].revents != 0) {
          relay_.drain(owners[i].first->rank, *owners[i].second);
        }
      }
      if (watch_job_end && (fds[1].revents & POLLIN)) {
        on_job_end();
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
      relay_.close(c.rank, c.out);
      relay_.close(c.rank, c.err);
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
  int job_end_fd_;
  ElasticBudget* budget_;  // --elastic; null otherwise
  bool job_ended_ = false;
  Relay relay_;
  std::vector<RankProcess> children_;
  AttemptResult result_;
  bool stopping_ = false;
  int succeeded_ = 0;          // ranks that exited 0
  int lost_ = 0;               // ranks that failed while the others went on (--elastic)
  bool term_pending_ = false;  // SIGTERM due at term_at_ (after the dump grace)
  Clock::time_point term_at_{};
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
    case AttemptResult::Kind::job_ended:
      return 1;
  }
  return 1;
}

std::string describe_failure(const AttemptResult& result) {
  std::string text = "rank " + std::to_string(result.rank) + " (local rank " +
                     std::to_string(result.local_rank) + ", pid " + std::to_string(result.pid) +
                     ") ";
  if (result.signal != 0) {
    return text + "was killed by signal " + std::to_string(result.signal) + " (" +
           signal_name(result.signal) + ")";
  }
  return text + "exited with code " + std::to_string(result.exit_code);
}

AttemptResult run_attempt(const LaunchPlan& plan, int attempt, int signal_fd, int job_end_fd,
                          ElasticBudget* budget) {
  Attempt a(plan, attempt, signal_fd, job_end_fd, budget);
  return a.run();
}

}  // namespace chorusrun
