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
// (elastic_model.hpp: the gradient does not depend on the world size). Each step is printed
// exactly once, in order, whenever a rank dies (docs/elastic.md, "Printed steps"): a line
// counts once its record ("printed/<step>") is in the store; the survivors' agreement brings
// the furthest step's line along, and the first rank 0 of a new group prints it if its record
// is missing.
//
// --grace-ms MS: how long the survivors wait for a rank not known to be dead (ShrinkOptions).
// --step-ms MS: compute time per step (a sleep), as a real model would take.
// --rejoin-wait-ms MS: after a shrink, how long the next step boundary waits for a replacement
// (GrowOptions::wait); 0: do not wait, take it whenever it arrives.
// For tests: --kill-at RANK:STEP makes the rank launched as RANK SIGKILL itself before STEP;
// --kill-after-op RANK:STEP after STEP's allreduce, before its line;
// --kill-after-us RANK:US makes it SIGKILL itself US microseconds after its first step, from
// another thread, wherever its main thread is then (in an op, between the op and the print, at
// the step boundary, in the last barrier), except between a printed line and its record's send
// (print_and_record());
// --stop-at RANK:STEP makes it print "stopping pid <pid>" and SIGSTOP itself there (whoever
// SIGCONTs it later finds it fenced out: it exits 3). A replacement does neither.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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
  std::vector<std::pair<int, int>> kill_after_op;
  std::vector<std::pair<int, int>> kill_after_us;  // (launch rank, microseconds)
};

std::pair<int, int> rank_and_number(const char* text, const char* what) {
  int rank = -1;
  int number = -1;
  char end = 0;
  if (std::sscanf(text, "%d:%d%c", &rank, &number, &end) != 2 || rank < 0 || number < 1) {
    std::fprintf(stderr, "elastic_train: expected RANK:%s, got '%s'\n", what, text);
    std::exit(2);
  }
  return {rank, number};
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(
          stderr,
          "usage: elastic_train --steps N [--grace-ms MS] [--step-ms MS] [--rejoin-wait-ms MS]\n"
          "                     [--kill-at R:S] [--stop-at R:S] [--kill-after-op R:S]\n"
          "                     [--kill-after-us R:US]\n");
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
      a.kill_at.push_back(rank_and_number(value, "STEP"));
    } else if (flag == "--stop-at") {
      a.stop_at.push_back(rank_and_number(value, "STEP"));
    } else if (flag == "--kill-after-op") {
      a.kill_after_op.push_back(rank_and_number(value, "STEP"));
    } else if (flag == "--kill-after-us") {
      a.kill_after_us.push_back(rank_and_number(value, "MICROSECONDS"));
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

// What a rank holds after its last completed step: the parameters, the step, and that step's
// line (its loss and the world that computed it), which the rank printing it may not have
// lived to print.
struct State {
  std::vector<double> w = std::vector<double>(elastic::kParams, 0.0);
  int completed = 0;
  double loss = 0;  // of step `completed`
  int world = 0;    // the world size that computed step `completed`
};

std::string step_line(const State& s) {
  char line[128];
  std::snprintf(line, sizeof line, "step %d world %d loss %.6f", s.completed, s.world, s.loss);
  return line;
}

// Held from a line's write to its record's send: --kill-after-us does not kill in between.
std::mutex print_window;

// Prints `line` and then records it as printed ("printed/<key>"): a line counts once its record
// is in the store. Between the write of the line and the send of its record's request (one
// system call after the other, nothing prepared in between), a rank that dies has printed a
// line the survivors cannot know about, and they print it again: no order of the two closes
// that window, as no order of two separate effects can (docs/elastic.md, "Printed steps").
// Everywhere else, a death loses no line and doubles none.
void print_and_record(chorus::Store& store, const std::string& key, const std::string& line) {
  const std::string text = line + "\n";
  const std::string record = "printed/" + key;
  std::lock_guard<std::mutex> hold(print_window);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  store.set(record, std::string_view("1"));  // durable once sent: the reply may never come
}

// The same, unless the record says it was printed already: by a rank 0 that died after
// printing it (the survivors then computed the step again, or took it from a survivor).
void print_unless_recorded(chorus::Store& store, const std::string& key, const std::string& line) {
  if (!store.check({"printed/" + key})) {
    print_and_record(store, key, line);
  }
}

// Brings the survivors to one state. A rank may have finished the failed step before the
// failure reached the others (its allreduce had all it needed), so the survivors take the
// furthest step any of them completed, from the lowest rank that has it, with that step's
// line; the steps are at most one apart, and either state is one the whole old world
// computed. The step's line is printed then unless its record is there: the rank that was to
// print it may have died after its allreduce and before its print.
void agree_on_state(chorus::ProcessGroup& pg, State& s, chorus::Store& store) {
  double furthest = s.completed;
  pg.allreduce(chorus::Tensor::of(&furthest, 1), {.op = chorus::ReduceOp::max})->wait();
  double source = s.completed == static_cast<int>(furthest) ? pg.rank() : pg.size();
  pg.allreduce(chorus::Tensor::of(&source, 1), {.op = chorus::ReduceOp::min})->wait();
  std::vector<double> state(s.w);
  state.push_back(s.loss);
  state.push_back(s.world);
  pg.broadcast(chorus::Tensor::of(state.data(), state.size()), {.root = static_cast<int>(source)})
      ->wait();
  s.world = static_cast<int>(state.back());
  state.pop_back();
  s.loss = state.back();
  state.pop_back();
  s.w = state;
  s.completed = static_cast<int>(furthest);
  if (pg.rank() == 0 && s.completed > 0) {
    print_unless_recorded(store, std::to_string(s.completed), step_line(s));
  }
}

// The members send a joiner the state (and the step it is at) from rank 0 of the larger group;
// every rank of it calls this right after grow() or join.
void share_state(chorus::ProcessGroup& pg, State& s) {
  std::vector<double> state(s.w);
  state.push_back(s.completed);
  pg.broadcast(chorus::Tensor::of(state.data(), state.size()))->wait();
  s.completed = static_cast<int>(state.back());
  state.pop_back();
  s.w = state;
}

// Shrinks until the survivors agree on the state (a rank may die during the recovery too).
// Throws on a rank that was fenced out.
std::shared_ptr<chorus::ProcessGroup> recover(std::shared_ptr<chorus::ProcessGroup> pg,
                                              const Args& args, State& s, chorus::Store& store) {
  chorus::ShrinkOptions options;
  if (args.grace_ms > 0) {
    options.grace = std::chrono::milliseconds(args.grace_ms);
  }
  for (;;) {
    pg = pg->shrink(options);
    try {
      agree_on_state(*pg, s, store);
      return pg;
    } catch (const chorus::Error& e) {
      std::fprintf(stderr, "elastic_train: recovery failed (%s); shrinking again\n", e.what());
    }
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

// Arms --kill-after-us for this rank: a thread that SIGKILLs the process then, wherever its
// main thread is.
void arm_kill_timer(const Args& args, int launch_rank) {
  for (const auto& [rank, us] : args.kill_after_us) {
    if (rank == launch_rank) {
      std::thread([us = us] {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        std::lock_guard<std::mutex> hold(print_window);  // the one window no order closes
        ::kill(::getpid(), SIGKILL);
      }).detach();
      return;
    }
  }
}

int train(int argc, char** argv) {
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
  chorus::Store& store = *world.store;
  const int launch_rank = world.launch.rank;
  const bool replacement = world.launch.elastic_join;
  State state;
  bool shrunk = false;   // since the last step boundary: wait there for a replacement
  bool changed = false;  // the group changed since the last completed step
  try {
    if (replacement) {
      share_state(*pg, state);
      std::fprintf(stderr,
                   "elastic_train: rank %d joined as rank %d/%d after step %d, %.0f ms "
                   "after it started\n",
                   launch_rank, pg->rank(), pg->size(), state.completed, ms_since(started));
    }
    for (;;) {
      if (state.completed == args.steps) {
        // The end: rank 0 prints the result, then every rank confirms it is still there, so
        // that a rank 0 that died before its last lines leaves them to the survivors.
        if (pg->rank() == 0) {
          pg->stop_admitting("the job finished");
          char line[64];
          std::snprintf(line, sizeof line, "final %.12g", elastic::sum(state.w));
          print_unless_recorded(store, "final", line);
        }
        try {
          pg->barrier()->wait();
          break;
        } catch (const chorus::Error& e) {
          std::fprintf(stderr, "elastic_train: rank %d: the last barrier failed: %s\n", launch_rank,
                       e.what());
          pg = recover(pg, args, state, store);
          continue;
        }
      }
      const int step = state.completed + 1;
      if (!replacement && listed(args.kill_at, launch_rank, step)) {
        store.set("killed", fmt_kill(launch_rank));  // for the recovery time below
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
      std::vector<double> g = elastic::local_gradient(state.w, step, pg->rank(), pg->size());
      try {
        pg->allreduce(chorus::Tensor::of(g.data(), g.size()))->wait();
      } catch (const chorus::Error& e) {
        std::fprintf(stderr, "elastic_train: rank %d: step %d failed: %s\n", launch_rank, step,
                     e.what());
        pg = recover(pg, args, state, store);
        shrunk = changed = true;
        continue;
      }
      if (!replacement && listed(args.kill_after_op, launch_rank, step)) {
        ::kill(::getpid(), SIGKILL);  // the others may have completed the step: nobody printed it
      }
      state.loss = elastic::apply_step(state.w, g);
      state.world = pg->size();
      state.completed = step;
      if (step == 1 && !replacement) {
        arm_kill_timer(args, launch_rank);
      }
      const bool first_on_new_group = changed;
      changed = false;
      if (pg->rank() == 0) {
        if (first_on_new_group) {
          // The survivors may have computed again a step that the dead rank 0 printed.
          print_unless_recorded(store, std::to_string(step), step_line(state));
          report_recovery(store, step, pg->size());  // how long the recovery or rejoin took
        } else {
          print_and_record(store, std::to_string(step), step_line(state));
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
          share_state(*pg, state);
          changed = true;
        }
      } catch (const chorus::Error& e) {
        std::fprintf(stderr, "elastic_train: rank %d: growing after step %d failed: %s\n",
                     launch_rank, step, e.what());
        if (pg->is_aborted()) {  // the group itself failed, not only the joiner
          pg = recover(pg, args, state, store);
          shrunk = changed = true;
        }
      }
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "elastic_train: rank %d gives up: %s\n", launch_rank, e.what());
    return e.code() == chorus::ErrorCode::aborted ? 3 : 1;
  }
  return 0;
}

}  // namespace

// A setup error (no launcher variables, a wrong token, no store) ends with its message and a
// non-zero status, never through std::terminate.
int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_train: %s\n", e.what());
    return 1;
  }
}
