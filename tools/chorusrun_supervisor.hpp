// SPDX-License-Identifier: BSD-3-Clause
// chorusrun's supervisor: starts the local ranks, relays their output, stops them all when one
// fails or chorusrun is signalled, and reaps everything it started.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chorusrun_args.hpp"
#include "chorusrun_bind.hpp"

namespace chorusrun {

// Everything a launch attempt needs, prepared once.
struct LaunchPlan {
  RunArgs args;
  std::string program_path;  // resolved against PATH
  std::string store_host;    // what ranks connect to
  int store_port = 0;
  // MASTER_PORT for the ranks: a port on store_host that was free when node 0 looked, for
  // PyTorch's env:// rendezvous (rank 0 hosts torch's own TCPStore there). chorus's store is
  // at CHORUS_STORE_ADDR, so the two never collide.
  int torch_master_port = 0;
  std::string store_token;            // "" when the store is open (multi-node without a token)
  std::vector<std::string> base_env;  // chorusrun's environment minus the variables it sets
  std::string log_dir;                // resolved (a temporary one for --tee without --log-dir)
  std::vector<CpuList> bindings;      // per local rank (--bind-to core); empty: unbound
};

struct AttemptResult {
  // job_ended: another node ended the attempt (multi-node restart rounds); the local ranks
  // were stopped.
  enum class Kind { ok, rank_failed, interrupted, job_ended } kind = Kind::ok;
  // The first rank that failed (rank_failed).
  int rank = -1;
  int local_rank = -1;
  pid_t pid = -1;
  int exit_code = 0;              // when it exited
  int signal = 0;                 // when a signal killed it
  std::int64_t failed_at_us = 0;  // system clock when it was reaped (orders failures across nodes)
  // The first signal chorusrun received during the attempt (0: none); no restart follows one.
  int interrupt_signal = 0;
};

// --elastic: what the job may still lose and restart. One node counts for itself; several
// count together through node 0's store (chorusrun_elastic.hpp), since --min-ranks and
// --max-restarts are the job's, not a node's.
class ElasticBudget {
 public:
  virtual ~ElasticBudget() = default;
  // Takes one of --max-restarts for a failed rank, to restart it as a joiner: the job's restart
  // number (1-based), or 0 when none is left.
  virtual int take_restart() = 0;
  // Counts one rank lost for good; returns the ranks the job has lost so far, this one included.
  virtual int record_loss() = 0;
};

// The budget of a job on one node: plain counters.
class LocalElasticBudget final : public ElasticBudget {
 public:
  explicit LocalElasticBudget(int max_restarts) : max_restarts_(max_restarts) {}
  int take_restart() override { return restarts_ < max_restarts_ ? ++restarts_ : 0; }
  int record_loss() override { return ++lost_; }

 private:
  int max_restarts_;
  int restarts_ = 0;
  int lost_ = 0;
};

// Runs one attempt: every local rank from start to exit. `signal_fd` is a signalfd for SIGCHLD,
// SIGINT, SIGTERM and SIGHUP (blocked in every thread). `job_end_fd` (multi-node; -1 without)
// becomes readable when another node ended the attempt: the local ranks are then stopped.
// Returns once every rank was reaped.
// `budget` (--elastic only; null otherwise) decides whether a failed rank is restarted as a
// joiner, or tolerated while the job keeps --min-ranks ranks.
AttemptResult run_attempt(const LaunchPlan& plan, int attempt, int signal_fd, int job_end_fd = -1,
                          ElasticBudget* budget = nullptr);

// "rank 3 (local rank 1, pid 812) exited with code 2" / "... was killed by signal 9 (SIGKILL)".
std::string describe_failure(const AttemptResult& result);

// "SIGSEGV" for 11.
std::string signal_name(int sig);

// The exit status chorusrun reports for a failed attempt: the rank's code, or 128 + signal.
int exit_status_of(const AttemptResult& result);

}  // namespace chorusrun
