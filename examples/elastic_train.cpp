// SPDX-License-Identifier: BSD-3-Clause
// Data-parallel training that keeps going when ranks die, and takes replacements back: run
// under
//   chorusrun --elastic --standalone -n 4 [--max-restarts K] elastic_train --steps 60
// and kill a rank; the survivors shrink their group (ProcessGroup::shrink), agree on the state
// and continue with the smaller world. With --max-restarts, chorusrun starts a replacement that
// joins the running job (CHORUS_ELASTIC_JOIN=1: init_world_from_env waits to be let in); the
// members let it in at their next step boundary (ProcessGroup::grow) and send it the state.
// The lowest rank prints one line per step, "step <i> world <w> loss <l>", and at the end
// "final <sum of the parameters>", which equals a single process's training
// (elastic_model.hpp: the gradient does not depend on the world size).
//
// --grace-ms MS: how long the survivors wait for a rank not known to be dead (ShrinkOptions).
// --step-ms MS: compute time per step (a sleep), as a real model would take.
// --rejoin-wait-ms MS: after a shrink, how long the next step boundary waits for a replacement
// (GrowOptions::wait); 0: do not wait, take it whenever it arrives.
// For tests: --kill-at RANK:STEP makes the rank launched as RANK SIGKILL itself before STEP;
// --stop-at RANK:STEP makes it print "stopping pid <pid>" and SIGSTOP itself there (whoever
// SIGCONTs it later finds it fenced out: it exits 3). A replacement does neither.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <chorus/chorus.hpp>

#include "elastic_model.hpp"

namespace {

struct Args {
  int steps = 60;
  int grace_ms = 0;                          // ShrinkOptions::grace; 0: its default
  int step_ms = 0;                           // simulated compute per step
  int rejoin_wait_ms = 0;                    // GrowOptions::wait after a shrink
  std::vector<std::pair<int, int>> kill_at;  // (launch rank, step)
  std::vector<std::pair<int, int>> stop_at;
};

std::pair<int, int> rank_and_step(const char* text) {
  int rank = -1;
  int step = -1;
  if (std::sscanf(text, "%d:%d", &rank, &step) != 2 || rank < 0 || step < 1) {
    std::fprintf(stderr, "elastic_train: expected RANK:STEP, got '%s'\n", text);
    std::exit(2);
  }
  return {rank, step};
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(
          stderr,
          "usage: elastic_train --steps N [--grace-ms MS] [--step-ms MS] [--rejoin-wait-ms MS]\n"
          "                     [--kill-at R:S] [--stop-at R:S]\n");
      std::exit(2);
    }
    const char* value = argv[++i];
    if (flag == "--steps") {
      a.steps = std::atoi(value);
    } else if (flag == "--grace-ms") {
      a.grace_ms = std::atoi(value);
    } else if (flag == "--step-ms") {
      a.step_ms = std::atoi(value);
    } else if (flag == "--rejoin-wait-ms") {
      a.rejoin_wait_ms = std::atoi(value);
    } else if (flag == "--kill-at") {
      a.kill_at.push_back(rank_and_step(value));
    } else if (flag == "--stop-at") {
      a.stop_at.push_back(rank_and_step(value));
    } else {
      std::fprintf(stderr, "elastic_train: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return a;
}

bool listed(const std::vector<std::pair<int, int>>& list, int rank, int step) {
  for (const auto& [r, s] : list) {
    if (r == rank && s == step) {
      return true;
    }
  }
  return false;
}

// Brings the survivors to one state. A rank may have finished the failed step before the
// failure reached the others (its allreduce had all it needed), so the survivors take the
// furthest step any of them completed, from the lowest rank that has it; the steps are at most
// one apart, and either state is one the whole old world computed.
void agree_on_state(chorus::ProcessGroup& pg, std::vector<double>& w, int& completed) {
  double furthest = completed;
  pg.allreduce(chorus::Tensor::of(&furthest, 1), {.op = chorus::ReduceOp::max})->wait();
  double source = completed == static_cast<int>(furthest) ? pg.rank() : pg.size();
  pg.allreduce(chorus::Tensor::of(&source, 1), {.op = chorus::ReduceOp::min})->wait();
  pg.broadcast(chorus::Tensor::of(w.data(), w.size()), {.root = static_cast<int>(source)})->wait();
  completed = static_cast<int>(furthest);
}

// The members send a joiner the state (and the step it is at) from rank 0 of the larger group;
// every rank of it calls this right after grow() or join.
void share_state(chorus::ProcessGroup& pg, std::vector<double>& w, int& completed) {
  std::vector<double> state(w);
  state.push_back(completed);
  pg.broadcast(chorus::Tensor::of(state.data(), state.size()))->wait();
  completed = static_cast<int>(state.back());
  state.pop_back();
  w = state;
}

// Shrinks until the survivors agree on the state (a rank may die during the recovery too).
// Throws on a rank that was fenced out.
std::shared_ptr<chorus::ProcessGroup> recover(std::shared_ptr<chorus::ProcessGroup> pg,
                                              const Args& args, std::vector<double>& w,
                                              int& completed) {
  chorus::ShrinkOptions options;
  if (args.grace_ms > 0) {
    options.grace = std::chrono::milliseconds(args.grace_ms);
  }
  for (;;) {
    pg = pg->shrink(options);
    try {
      agree_on_state(*pg, w, completed);
      return pg;
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "elastic_train: recovery failed (%s); shrinking again\n", e.what());
    }
  }
}

// Prints once per key for the whole job, whichever rank gets there first: the printing rank may
// die after printing a step that the survivors then compute again.
void print_once(chorus::Store& store, const std::string& key, const std::string& line) {
  if (store.add("printed/" + key, 1) == 1) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

using Clock = std::chrono::steady_clock;

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "<time us> <rank>": when a rank killed itself (--kill-at), on the clock every process of this
// host, namespaces included, shares.
std::string fmt_kill(int rank) { return std::to_string(now_us()) + " " + std::to_string(rank); }

// After a shrink, on the new rank 0 once its first step is done: how long since the kill.
void report_recovery(chorus::Store& store, int step, int world) {
  if (!store.check({"killed"})) {
    return;  // a stopped rank, or one that died by other hands
  }
  long long killed_us = 0;
  int rank = -1;
  if (std::sscanf(chorus::to_string(store.get("killed")).c_str(), "%lld %d", &killed_us, &rank) ==
      2) {
    std::fprintf(stderr,
                 "elastic_train: step %d done on world %d, %.1f ms after rank %d was killed\n",
                 step, world, static_cast<double>(now_us() - killed_us) / 1000, rank);
  }
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Clock::time_point started = Clock::now();
  const Args args = parse(argc, argv);
  chorus::World world;
  try {
    world = chorus::init_world_from_env();
  } catch (const chorus::Error& e) {
    // A replacement that arrives after the job stopped admitting has nothing to do.
    if (e.code() == chorus::ErrorCode::aborted && chorus::launch_info_from_env().elastic_join) {
      std::fprintf(stderr, "elastic_train: nothing to join: %s\n", e.what());
      return 0;
    }
    throw;
  }
  // The one reference to the group: a group given up for its survivors' is destroyed then, which
  // closes its links (a rank that wakes up later finds them closed).
  std::shared_ptr<chorus::ProcessGroup> pg = std::move(world.group);
  const int launch_rank = world.launch.rank;
  const bool replacement = world.launch.elastic_join;
  std::vector<double> w(elastic::kParams, 0.0);
  int completed = 0;
  bool shrunk = false;   // since the last step boundary: wait there for a replacement
  bool changed = false;  // the group changed since the last completed step
  try {
    if (replacement) {
      share_state(*pg, w, completed);
      std::fprintf(stderr,
                   "elastic_train: rank %d joined as rank %d/%d after step %d, %.0f ms "
                   "after it started\n",
                   launch_rank, pg->rank(), pg->size(), completed, ms_since(started));
    }
    while (completed < args.steps) {
      const int step = completed + 1;
      if (!replacement && listed(args.kill_at, launch_rank, step)) {
        world.store->set("killed", fmt_kill(launch_rank));  // for the recovery time below
        ::kill(::getpid(), SIGKILL);
      }
      if (!replacement && listed(args.stop_at, launch_rank, step)) {
        std::printf("stopping pid %d\n", static_cast<int>(::getpid()));
        std::fflush(stdout);
        ::raise(SIGSTOP);
      }
      if (args.step_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(args.step_ms));  // the "compute"
      }
      std::vector<double> g = elastic::local_gradient(w, step, pg->rank(), pg->size());
      try {
        pg->allreduce(chorus::Tensor::of(g.data(), g.size()))->wait();
      } catch (const chorus::Error& e) {
        std::fprintf(stderr, "elastic_train: rank %d: step %d failed: %s\n", launch_rank, step,
                     e.what());
        pg = recover(pg, args, w, completed);
        shrunk = changed = true;
        continue;
      }
      const double loss = elastic::apply_step(w, g);
      completed = step;
      const bool first_on_new_group = changed;
      changed = false;
      if (pg->rank() == 0) {
        char line[128];
        std::snprintf(line, sizeof line, "step %d world %d loss %.6f", step, pg->size(), loss);
        print_once(*world.store, std::to_string(step), line);
        if (first_on_new_group) {  // how long the recovery or the rejoin took
          report_recovery(*world.store, step, pg->size());
        }
      }
      // The step boundary: let in whoever waits to join (after a shrink, wait for one a while).
      chorus::GrowOptions grow;
      if (shrunk) {
        grow.wait = std::chrono::milliseconds(args.rejoin_wait_ms);
      }
      shrunk = false;
      try {
        if (auto larger = pg->grow(grow)) {
          pg = std::move(larger);
          share_state(*pg, w, completed);
          changed = true;
        }
      } catch (const chorus::Error& e) {
        std::fprintf(stderr, "elastic_train: rank %d: growing after step %d failed: %s\n",
                     launch_rank, step, e.what());
        if (pg->is_aborted()) {  // the group itself failed, not only the joiner
          pg = recover(pg, args, w, completed);
          shrunk = changed = true;
        }
      }
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "elastic_train: rank %d gives up: %s\n", launch_rank, e.what());
    return e.code() == chorus::ErrorCode::aborted ? 3 : 1;
  }
  if (pg->rank() == 0) {
    pg->stop_admitting("the job finished");
    char line[64];
    std::snprintf(line, sizeof line, "final %.12g", elastic::sum(w));
    print_once(*world.store, "final", line);
  }
  return 0;
}
