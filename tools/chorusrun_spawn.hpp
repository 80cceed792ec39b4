// SPDX-License-Identifier: BSD-3-Clause
// Starting one rank: its environment, its log files, and fork/exec with its stdout and stderr
// on pipes that the relay reads.
//
// Process model. Each rank is the leader of its own process group, so a terminal's Ctrl-C
// reaches chorusrun only (which forwards it once) and kill(-pgid) also reaches whatever the
// rank started. Each rank has PR_SET_PDEATHSIG = SIGKILL, set before exec and re-checked with
// getppid(), so it dies with chorusrun even when chorusrun is SIGKILLed. chorusrun has threads
// (the store server), so between fork and exec a child only makes async-signal-safe calls on
// data prepared before the fork.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "chorusrun_relay.hpp"
#include "chorusrun_supervisor.hpp"

namespace chorusrun {

// One local rank of an attempt.
struct RankProcess {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;  // wait status once it exited
  // Times this slot was restarted as a joiner of the running job (--elastic --max-restarts):
  // from the first, the process gets CHORUS_ELASTIC_JOIN=1.
  int rejoins = 0;
  OutputStream out;
  OutputStream err;
};

// The variables chorusrun sets for rank c, on top of plan.base_env.
std::vector<std::string> rank_env(const LaunchPlan& plan, int attempt, const RankProcess& c);

// Opens <log_dir>/attempt_<attempt>/<rank>/{stdout,stderr}.log (<rank>.rejoin<k> for the k-th
// joiner in that slot) into c.out.log / c.err.log (creating the directories); on failure says
// so and logs to the console only.
void open_rank_logs(const std::string& log_dir, int attempt, RankProcess& c);

// Forks and execs the program for rank c (stdin from null_fd). On success c.pid, c.running and
// the pipe ends are set; on failure says why and returns false.
bool spawn_rank(const LaunchPlan& plan, int attempt, RankProcess& c, int null_fd);

}  // namespace chorusrun
