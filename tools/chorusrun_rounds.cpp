// SPDX-License-Identifier: BSD-3-Clause
#include "chorusrun_rounds.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include <chorus/errors.hpp>

#include "chorusrun_relay.hpp"

namespace chorusrun {
namespace {

// A verdict may take as long as the job runs: the watcher's get() waits this long.
constexpr auto kJobLifetime = std::chrono::hours(24 * 365);

const char* kind_word(Verdict::Kind k) {
  switch (k) {
    case Verdict::Kind::done:
      return "done";
    case Verdict::Kind::restart:
      return "restart";
    case Verdict::Kind::fail:
      return "fail";
    case Verdict::Kind::stop:
      return "stop";
    case Verdict::Kind::lost:
      return "lost";
  }
  return "lost";
}

}  // namespace

std::string encode_verdict(const Verdict& v) {
  return std::string(kind_word(v.kind)) + " " + std::to_string(v.status) + " " + v.reason;
}

Verdict decode_verdict(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  Verdict v;
  in >> word >> v.status;
  std::getline(in >> std::ws, v.reason);
  if (word == "done") {
    v.kind = Verdict::Kind::done;
  } else if (word == "restart") {
    v.kind = Verdict::Kind::restart;
  } else if (word == "fail") {
    v.kind = Verdict::Kind::fail;
  } else if (word == "stop") {
    v.kind = Verdict::Kind::stop;
  } else {
    v.kind = Verdict::Kind::lost;
    v.status = 1;
    v.reason = "unreadable verdict '" + text + "' in the store";
  }
  return v;
}

JobRounds::JobRounds(const std::string& host, int port, const std::string& token, int nnodes,
                     int node_rank)
    : nnodes_(nnodes), node_rank_(node_rank) {
  store_ = std::make_unique<chorus::TcpStore>(chorus::TcpStoreOptions{
      .host = host, .port = static_cast<std::uint16_t>(port), .token = token});
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (event_fd_ < 0) {
    throw chorus::Error(chorus::ErrorCode::internal, "chorusrun: eventfd failed");
  }
}

JobRounds::~JobRounds() {
  if (watcher_.joinable()) {
    watcher_.join();
  }
  if (event_fd_ >= 0) {
    ::close(event_fd_);
  }
}

std::string JobRounds::key(int attempt, const char* name) const {
  return "chorusrun/attempt/" + std::to_string(attempt) + "/" + name;
}

void JobRounds::wait_for_all_nodes(int attempt) {
  if (store_->add(key(attempt, "ready"), 1) == nnodes_) {
    store_->set(key(attempt, "go"), std::string_view("1"));
  }
  try {
    store_->wait({key(attempt, "go")});
  } catch (const chorus::TimeoutError&) {
    const auto got = store_->add(key(attempt, "ready"), 0);
    throw chorus::TimeoutError(
        "chorusrun: node " + std::to_string(node_rank_) + ": only " + std::to_string(got) + " of " +
        std::to_string(nnodes_) + " nodes reached attempt " + std::to_string(attempt) +
        " (is every node's chorusrun running with the same --nnodes and --master-addr/port?)");
  }
}

int JobRounds::watch(int attempt) {
  if (watcher_.joinable()) {
    watcher_.join();  // the previous attempt's verdict is out, so it has ended
  }
  std::uint64_t drained = 0;
  pollfd p{event_fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) {
    [[maybe_unused]] const auto n = ::read(event_fd_, &drained, sizeof drained);
  }
  watcher_ = std::thread([this, end = key(attempt, "end")] {
    Verdict v;
    try {
      v = decode_verdict(
          store_->get_string(end, std::chrono::duration_cast<chorus::Duration>(kJobLifetime)));
    } catch (const std::exception& e) {
      v.kind = Verdict::Kind::lost;
      v.status = 1;
      v.reason = std::string("lost node 0's store: ") + e.what();
    }
    verdict_ = v;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(event_fd_, &one, sizeof one);
  });
  return event_fd_;
}

void JobRounds::declare(int attempt, const Verdict& verdict) {
  try {
    store_->compare_set(key(attempt, "end"), chorus::Bytes{},
                        chorus::to_bytes(encode_verdict(verdict)));
  } catch (const chorus::Error&) {
    // The watcher reports the lost store.
  }
}

void JobRounds::node_done(int attempt) {
  try {
    if (store_->add(key(attempt, "done"), 1) == nnodes_) {
      declare(attempt, Verdict{Verdict::Kind::done, 0, "every node's ranks exited 0"});
    }
  } catch (const chorus::Error&) {
    // The watcher reports the lost store.
  }
}

void JobRounds::ended(int attempt, const std::string& failure, std::int64_t at_us) {
  try {
    if (!failure.empty()) {
      store_->append(key(attempt, "failures"),
                     chorus::to_bytes(std::to_string(at_us) + " " + failure + "\n"));
    }
    if (store_->add(key(attempt, "ended"), 1) == nnodes_) {
      store_->set(key(attempt, "all_ended"), std::string_view("1"));
    }
  } catch (const chorus::Error&) {
    // The watcher reports the lost store.
  }
}

std::string JobRounds::first_failure(int attempt, chorus::Duration bound,
                                     const std::string& fallback) {
  try {
    try {
      store_->wait({key(attempt, "all_ended")}, bound);
    } catch (const chorus::TimeoutError&) {
      // A node that never ends the attempt has lost its chorusrun: name what we know.
    }
    if (!store_->check({key(attempt, "failures")})) {
      return fallback;
    }
    std::istringstream lines(store_->get_string(key(attempt, "failures")));
    std::string best;
    long long best_at = 0;
    for (std::string line; std::getline(lines, line);) {
      const auto space = line.find(' ');
      if (space == std::string::npos) {
        continue;
      }
      const long long at = std::atoll(line.substr(0, space).c_str());
      if (best.empty() || at < best_at) {
        best = line.substr(space + 1);
        best_at = at;
      }
    }
    return best.empty() ? fallback : best;
  } catch (const chorus::Error&) {
    return fallback;
  }
}

void JobRounds::leave(int attempt, chorus::Duration bound) {
  try {
    if (store_->add(key(attempt, "read"), 1) == nnodes_) {
      store_->set(key(attempt, "all_read"), std::string_view("1"));
    }
    if (node_rank_ == 0) {
      store_->wait({key(attempt, "all_read")}, bound);
    }
  } catch (const chorus::Error&) {
    // A node that never reads it has died; its own chorusrun reports that.
  }
}

Verdict JobRounds::verdict() {
  if (watcher_.joinable()) {
    watcher_.join();
  }
  return verdict_;
}

namespace {

// How long nodes wait for each other to end a failed attempt before naming its cause: the
// ranks' stop grace (SIGUSR1 dumps, SIGTERM, SIGKILL) fits well within it.
constexpr auto kEndWait = std::chrono::seconds(30);

// This node's verdict on an attempt it ended itself.
Verdict local_verdict(const LaunchPlan& plan, int attempt, const AttemptResult& r) {
  const std::string node = "node " + std::to_string(plan.args.node_rank) + ": ";
  switch (r.kind) {
    case AttemptResult::Kind::rank_failed:
      return Verdict{
          attempt < plan.args.max_restarts ? Verdict::Kind::restart : Verdict::Kind::fail,
          exit_status_of(r), node + describe_failure(r)};
    case AttemptResult::Kind::interrupted:
      return Verdict{Verdict::Kind::stop, exit_status_of(r),
                     node + "chorusrun got " + signal_name(r.interrupt_signal)};
    case AttemptResult::Kind::ok:
    case AttemptResult::Kind::job_ended:
      break;
  }
  return Verdict{Verdict::Kind::lost, 1, node + "no verdict"};
}

// Waits for the attempt's verdict; a signal meanwhile becomes this node's "stop" verdict
// (unless another came first), so a Ctrl-C on any node ends the job everywhere.
Verdict await_verdict(JobRounds& rounds, int attempt, int end_fd, int signal_fd,
                      const LaunchPlan& plan) {
  for (;;) {
    pollfd fds[2] = {{end_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      break;
    }
    if (fds[0].revents & POLLIN) {
      break;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info[16];
      const ssize_t got = ::read(signal_fd, info, sizeof info);
      for (ssize_t k = 0; k < got / static_cast<ssize_t>(sizeof(signalfd_siginfo)); ++k) {
        const int sig = static_cast<int>(info[k].ssi_signo);
        if (sig != SIGCHLD) {
          rounds.declare(attempt, Verdict{Verdict::Kind::stop, 128 + sig,
                                          "node " + std::to_string(plan.args.node_rank) +
                                              ": chorusrun got " + signal_name(sig)});
        }
      }
    }
  }
  return rounds.verdict();
}

}  // namespace

int run_job_rounds(const LaunchPlan& plan, int signal_fd) {
  const RunArgs& args = plan.args;
  const std::string me = "node " + std::to_string(args.node_rank);
  std::unique_ptr<JobRounds> rounds;
  try {
    rounds = std::make_unique<JobRounds>(plan.store_host, plan.store_port, plan.store_token,
                                         args.nnodes, args.node_rank);
  } catch (const chorus::Error& e) {
    say(me + ": cannot reach node 0's store at " + plan.store_host + ":" +
        std::to_string(plan.store_port) + ": " + e.what());
    return 1;
  }
  for (int attempt = 0;; ++attempt) {
    try {
      rounds->wait_for_all_nodes(attempt);
    } catch (const chorus::Error& e) {
      say(e.what());
      return 1;
    }
    const int end_fd = rounds->watch(attempt);
    const AttemptResult result = run_attempt(plan, attempt, signal_fd, end_fd);
    if (result.kind == AttemptResult::Kind::ok) {
      rounds->node_done(attempt);
    } else if (result.kind != AttemptResult::Kind::job_ended) {
      rounds->declare(attempt, local_verdict(plan, attempt, result));
    }
    rounds->ended(attempt,
                  result.kind == AttemptResult::Kind::rank_failed
                      ? "node " + std::to_string(args.node_rank) + ": " + describe_failure(result)
                      : std::string(),
                  result.failed_at_us);
    Verdict v = await_verdict(*rounds, attempt, end_fd, signal_fd, plan);
    if (v.kind == Verdict::Kind::restart || v.kind == Verdict::Kind::fail) {
      // Name the root cause (the earliest failure), not the first node to speak.
      v.reason = rounds->first_failure(attempt, kEndWait, v.reason);
    }
    // A node whose own rank failed exits with that rank's status; the others with the verdict's.
    const bool failed_here = result.kind == AttemptResult::Kind::rank_failed ||
                             result.kind == AttemptResult::Kind::interrupted;
    const int status = failed_here ? exit_status_of(result) : (v.status != 0 ? v.status : 1);
    if (v.kind != Verdict::Kind::restart && v.kind != Verdict::Kind::lost) {
      rounds->leave(attempt, std::chrono::seconds(30));
    }
    switch (v.kind) {
      case Verdict::Kind::done:
        return 0;
      case Verdict::Kind::restart:
        say(me + ": restarting every node's ranks (restart " + std::to_string(attempt + 1) +
            " of " + std::to_string(args.max_restarts) + "): " + v.reason);
        continue;
      case Verdict::Kind::fail:
        say(me + ": the job failed" + (args.max_restarts > 0 ? " and no restarts are left" : "") +
            ": " + v.reason + "; exiting with " + std::to_string(status));
        return status;
      case Verdict::Kind::stop:
        say(me + ": the job was stopped: " + v.reason + "; exiting with " + std::to_string(status));
        return status;
      case Verdict::Kind::lost:
        say(me + ": " + v.reason + "; exiting with 1");
        return 1;
    }
  }
}

}  // namespace chorusrun
