// SPDX-License-Identifier: BSD-3-Clause
// Restart rounds across nodes (--nnodes > 1). Every node's chorusrun runs attempt k of the job
// at the same time, and attempt k ends the same way on every node: the first node that decides
// (a local rank failed, or chorusrun was signalled) writes the attempt's verdict to node 0's
// store, and every node acts on that one verdict: stop its ranks, then start attempt k+1
// together, or exit. Keys (node 0's store, which lives in node 0's chorusrun):
//   chorusrun/attempt/<k>/ready   counter: nodes at the start of attempt k
//   chorusrun/attempt/<k>/go      set by the last node to arrive: attempt k may start
//   chorusrun/attempt/<k>/done    counter: nodes whose local ranks all exited 0
//   chorusrun/attempt/<k>/end     the verdict (first writer wins, compare_set)
//   chorusrun/attempt/<k>/read    counter: nodes that read a final verdict (node 0 waits for all)
//   chorusrun/attempt/<k>/failures  appended "<time us> <what>" lines: every node's first failure
//   chorusrun/attempt/<k>/ended   counter: nodes whose ranks of attempt k are all gone
// The first verdict may come from a node whose rank only failed because another node's rank
// died first; so before naming the cause, nodes wait (bounded) for every node to end the
// attempt and name the earliest failure.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <chorus/tcp_store.hpp>

#include "chorusrun_supervisor.hpp"

namespace chorusrun {

struct Verdict {
  enum class Kind {
    done,     // every node's ranks exited 0
    restart,  // a rank failed and restarts are left: every node starts the next attempt
    fail,     // a rank failed and no restarts are left
    stop,     // a node's chorusrun was signalled
    lost,     // node 0's store is gone (its chorusrun died): nobody can coordinate
  };
  Kind kind = Kind::done;
  int status = 0;      // the exit status for fail/stop (the failing rank's, or 128 + signal)
  std::string reason;  // "node 1: rank 3 (local rank 1, pid 812) exited with code 2"
};

class JobRounds {
 public:
  // `token`: the job's store token ("" for an open store).
  JobRounds(const std::string& host, int port, const std::string& token, int nnodes, int node_rank);
  ~JobRounds();  // waits for the watcher (it ends once the attempt's verdict is out)
  JobRounds(const JobRounds&) = delete;
  JobRounds& operator=(const JobRounds&) = delete;

  // Blocks until every node reached the start of `attempt` (CHORUS_TIMEOUT, default 10 min;
  // throws chorus::TimeoutError naming how many nodes came).
  void wait_for_all_nodes(int attempt);
  // Starts watching for attempt's verdict; returns an fd that becomes readable once it is out.
  int watch(int attempt);
  // Publishes this node's verdict unless another node's came first.
  void declare(int attempt, const Verdict& verdict);
  // This node's ranks all exited 0; the last node to say so declares "done".
  void node_done(int attempt);
  // The verdict of the watched attempt (blocks until it is out).
  Verdict verdict();
  // Records this node's end of `attempt`: its first failure ("" if none), at `at_us`.
  void ended(int attempt, const std::string& failure, std::int64_t at_us);
  // The earliest failure any node recorded for `attempt`, once every node ended it or after
  // `bound`; `fallback` if none was recorded.
  std::string first_failure(int attempt, chorus::Duration bound, const std::string& fallback);
  // After a final verdict: node 0 hosts the store, so it leaves only once every node has read
  // the verdict (bounded: a node that died is not waited for past `bound`).
  void leave(int attempt, chorus::Duration bound);

 private:
  std::string key(int attempt, const char* name) const;

  int nnodes_;
  int node_rank_;
  std::unique_ptr<chorus::TcpStore> store_;
  std::thread watcher_;
  int event_fd_ = -1;
  Verdict verdict_;  // written by the watcher before it signals event_fd_
};

// Runs the job's attempts in rounds with the other nodes (--nnodes > 1) and returns
// chorusrun's exit status: 0 when every node's ranks succeeded, else the failing rank's status
// (or 128 + signal; 1 when node 0's store was lost).
int run_job_rounds(const LaunchPlan& plan, int signal_fd);

// "restart 2 node 1: rank 3 ..." <-> Verdict (the value of the end key).
std::string encode_verdict(const Verdict& v);
Verdict decode_verdict(const std::string& text);

}  // namespace chorusrun
