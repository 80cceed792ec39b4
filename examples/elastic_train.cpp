// SPDX-License-Identifier: BSD-3-Clause
// Data-parallel training that keeps going when ranks die: run under
//   chorusrun --elastic --standalone -n 4 elastic_train --steps 60
// and kill a rank; the survivors shrink their group (ProcessGroup::shrink), agree on the state
// and continue with the smaller world. The lowest surviving rank prints one line per step,
// "step <i> world <w> loss <l>", and at the end "final <sum of the parameters>", which equals a
// single process's training (elastic_model.hpp: the gradient does not depend on the world size).
//
// --grace-ms MS: how long the survivors wait for a rank not known to be dead (ShrinkOptions).
// For tests: --kill-at RANK:STEP makes the rank launched as RANK SIGKILL itself before STEP;
// --stop-at RANK:STEP makes it print "stopping pid <pid>" and SIGSTOP itself there (whoever
// SIGCONTs it later finds it fenced out: it exits 3).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <chorus/chorus.hpp>

#include "elastic_model.hpp"

namespace {

struct Args {
  int steps = 60;
  int grace_ms = 0;                          // ShrinkOptions::grace; 0: its default
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
          "usage: elastic_train --steps N [--grace-ms MS] [--kill-at R:S] [--stop-at R:S]\n");
      std::exit(2);
    }
    const char* value = argv[++i];
    if (flag == "--steps") {
      a.steps = std::atoi(value);
    } else if (flag == "--grace-ms") {
      a.grace_ms = std::atoi(value);
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

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chorus::World world = chorus::init_world_from_env();
  // The one reference to the group: a group given up for its survivors' is destroyed then, which
  // closes its links (a rank that wakes up later finds them closed).
  std::shared_ptr<chorus::ProcessGroup> pg = std::move(world.group);
  const int launch_rank = world.launch.rank;
  std::vector<double> w(elastic::kParams, 0.0);
  int completed = 0;
  try {
    while (completed < args.steps) {
      const int step = completed + 1;
      if (listed(args.kill_at, launch_rank, step)) {
        ::kill(::getpid(), SIGKILL);
      }
      if (listed(args.stop_at, launch_rank, step)) {
        std::printf("stopping pid %d\n", static_cast<int>(::getpid()));
        std::fflush(stdout);
        ::raise(SIGSTOP);
      }
      std::vector<double> g = elastic::local_gradient(w, step, pg->rank(), pg->size());
      try {
        pg->allreduce(chorus::Tensor::of(g.data(), g.size()))->wait();
      } catch (const chorus::Error& e) {
        std::fprintf(stderr, "elastic_train: rank %d: step %d failed: %s\n", launch_rank, step,
                     e.what());
        pg = recover(pg, args, w, completed);
        continue;
      }
      const double loss = elastic::apply_step(w, g);
      completed = step;
      if (pg->rank() == 0) {
        char line[128];
        std::snprintf(line, sizeof line, "step %d world %d loss %.6f", step, pg->size(), loss);
        print_once(*world.store, std::to_string(step), line);
      }
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "elastic_train: rank %d gives up: %s\n", launch_rank, e.what());
    return e.code() == chorus::ErrorCode::aborted ? 3 : 1;
  }
  if (pg->rank() == 0) {
    char line[64];
    std::snprintf(line, sizeof line, "final %.12g", elastic::sum(w));
    print_once(*world.store, "final", line);
  }
  return 0;
}
