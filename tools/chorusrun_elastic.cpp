// SPDX-License-Identifier: BSD-3-Clause
#include "chorusrun_elastic.hpp"

#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "chorusrun_relay.hpp"
#include "chorusrun_rounds.hpp"

namespace chorusrun {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kBeat = std::chrono::seconds(1);
// A node not heard from for this long has lost its chorusrun (killed, host down).
constexpr auto kNodeSilence = std::chrono::seconds(5);
// The first attempt: --elastic never restarts the job as a whole.
constexpr int kAttempt = 0;

std::string key(const std::string& name) { return "chorusrun/elastic/" + name; }

std::unique_ptr<chorus::TcpStore> connect(const LaunchPlan& plan) {
  return std::make_unique<chorus::TcpStore>(
      chorus::TcpStoreOptions{.host = plan.store_host,
                              .port = static_cast<std::uint16_t>(plan.store_port),
                              .token = plan.store_token});
}

// The job's budget, counted in node 0's store. A node that lost the store can neither restart
// nor tolerate: its ranks cannot shrink without the store anyway.
class StoreElasticBudget final : public ElasticBudget {
 public:
  StoreElasticBudget(chorus::Store& store, const RunArgs& args) : store_(store), args_(args) {}

  int take_restart() override {
    try {
      const auto n = store_.add(key("restarts"), 1);
      return n <= args_.max_restarts ? static_cast<int>(n) : 0;
    } catch (const chorus::Error&) {
      return 0;
    }
  }
  int record_loss() override {
    try {
      return static_cast<int>(store_.add(key("lost"), 1));
    } catch (const chorus::Error&) {
      return args_.nnodes * args_.nproc_per_node;  // as if every rank were lost
    }
  }

 private:
  chorus::Store& store_;
  const RunArgs& args_;
};

// This node's heartbeat in node 0's store, on a thread and a connection of its own.
class Heartbeat {
 public:
  Heartbeat(const LaunchPlan& plan, int node)
      : store_(connect(plan)), key_(key("beat/" + std::to_string(node))) {
    thread_ = std::thread([this] { run(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      try {
        store_->add(key_, 1);
      } catch (const chorus::Error&) {
        return;  // node 0 is gone: the verdict's watcher reports it
      }
      cv_.wait_for(lock, kBeat, [this] { return stop_; });
    }
  }

  std::unique_ptr<chorus::TcpStore> store_;
  std::string key_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// On node 0, once its own ranks are done: waits until every other node has finished or gone
// silent, or a verdict is out (end_fd readable). Returns the nodes it found silent.
std::string wait_for_other_nodes(chorus::Store& store, const RunArgs& args, int end_fd) {
  std::map<int, std::pair<std::int64_t, Clock::time_point>> last_beat;
  std::string silent;
  for (;;) {
    bool waiting = false;
    silent.clear();
    for (int node = 1; node < args.nnodes; ++node) {
      if (store.check({key("finished/" + std::to_string(node))})) {
        continue;
      }
      const std::int64_t beat = store.add(key("beat/" + std::to_string(node)), 0);
      auto& [seen, since] = last_beat.try_emplace(node, beat, Clock::now()).first->second;
      if (beat != seen) {
        seen = beat;
        since = Clock::now();
      }
      if (Clock::now() - since >= kNodeSilence) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(node);
      } else {
        waiting = true;
      }
    }
    if (!waiting) {
      return silent;
    }
    pollfd p{end_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kBeat).count())) > 0) {
      return silent;  // another node declared the job's end
    }
  }
}

}  // namespace

int run_elastic_job(const LaunchPlan& plan, int signal_fd) {
  const RunArgs& args = plan.args;
  const std::string me = "node " + std::to_string(args.node_rank);
  std::unique_ptr<JobRounds> rounds;
  std::unique_ptr<chorus::TcpStore> store;
  try {
    rounds = std::make_unique<JobRounds>(plan.store_host, plan.store_port, plan.store_token,
                                         args.nnodes, args.node_rank);
    store = connect(plan);
    rounds->wait_for_all_nodes(kAttempt);
  } catch (const chorus::Error& e) {
    say(me + ": cannot start the elastic job with node 0's store at " + plan.store_host + ":" +
        std::to_string(plan.store_port) + ": " + e.what());
    return 1;
  }
  const int end_fd = rounds->watch(kAttempt);
  AttemptResult result;
  {
    Heartbeat heartbeat(plan, args.node_rank);
    StoreElasticBudget budget(*store, args);
    result = run_attempt(plan, kAttempt, signal_fd, end_fd, &budget);
  }
  switch (result.kind) {
    case AttemptResult::Kind::ok:
      try {
        store->set(key("finished/" + std::to_string(args.node_rank)), std::string_view("1"));
        if (args.node_rank == 0) {
          const std::string silent = wait_for_other_nodes(*store, args, end_fd);
          rounds->declare(
              kAttempt, Verdict{Verdict::Kind::done, 0,
                                silent.empty() ? "every node finished"
                                               : "every node finished or was lost (node " + silent +
                                                     " went silent)"});
        }
      } catch (const chorus::Error& e) {
        say(me + ": lost node 0's store at the end of the job: " + e.what());
      }
      break;
    case AttemptResult::Kind::rank_failed:
      rounds->declare(kAttempt, Verdict{Verdict::Kind::fail, exit_status_of(result),
                                        me + ": " + describe_failure(result) +
                                            " and the job is below --min-ranks"});
      break;
    case AttemptResult::Kind::interrupted:
      rounds->declare(kAttempt,
                      Verdict{Verdict::Kind::stop, exit_status_of(result),
                              me + ": chorusrun got " + signal_name(result.interrupt_signal)});
      break;
    case AttemptResult::Kind::job_ended:
      break;
  }
  const Verdict v = rounds->verdict();
  const bool failed_here = result.kind == AttemptResult::Kind::rank_failed ||
                           result.kind == AttemptResult::Kind::interrupted;
  if (failed_here) {
    return exit_status_of(result);
  }
  if (v.kind == Verdict::Kind::done) {
    if (args.node_rank == 0) {
      say(me + ": --elastic: the job is done: " + v.reason);
    }
    return 0;
  }
  say(me + ": --elastic: the job ended: " + v.reason);
  return v.status != 0 ? v.status : 1;
}

}  // namespace chorusrun
