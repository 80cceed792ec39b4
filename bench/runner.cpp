// SPDX-License-Identifier: BSD-3-Clause
// The benchmark runner: init from the environment, sweep sizes, time, check, and hand the
// numbers to the report (report.cpp; the checks are in check.cpp).
//
// Per row (one size, type, op, root), as nccl-tests does: out-of-place then in-place. Each runs
// one untimed op, a barrier, then -n iterations of -m ops timed on the host (issued back to
// back and waited at the end unless -z), then -c checked ops on fresh patterns. Each rank
// publishes its time and wrong-element count through the store; rank 0 combines them (-a) and
// prints. The store, not the group, carries these numbers so that the nccl backend (whose
// tensors live on the GPU) needs no extra device buffers for bookkeeping.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "common.hpp"
#include "memory.hpp"
#include "report.hpp"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using WorkList = std::vector<std::shared_ptr<chorus::Work>>;

double percentile(std::vector<double> v, double pct) {
  if (v.empty()) {
    return NAN;
  }
  std::sort(v.begin(), v.end());
  const auto idx =
      static_cast<std::size_t>(std::ceil(pct / 100.0 * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

// What one rank measured for one half of a row.
struct Measure {
  double time_us = 0;      // average per op
  double median_us = NAN;  // per-op completion intervals (JSON only)
  double p99_us = NAN;
  long long wrong = 0;
};

// A failure that ends the run with exit status 2 (the command line asked for something that
// cannot be done, e.g. an unwritable --json path).
struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Runner {
 public:
  Runner(const Options& opt, const CollBench& bench, chorus::World& world, int argc, char** argv)
      : opt_(opt),
        bench_(bench),
        group_(*world.group),
        store_(*world.store),
        rank_(world.group->rank()),
        nranks_(world.group->size()),
        buffers_(make_memory(opt.backend, world.launch.local_rank, opt.registered != 0),
                 std::max<std::size_t>(opt.max_bytes, 64)),
        checker_(opt, bench, buffers_, rank_, nranks_),
        report_(opt, bench, world.launch.launcher, nranks_,
                std::vector<std::string>(argv, argv + argc)) {}

  int run() {
    if (bench_.uses_root && opt_.root >= nranks_) {
      throw UsageError("-r " + std::to_string(opt_.root) + " is not a rank (world size " +
                       std::to_string(nranks_) + ")");
    }
    open_json();
    header();
    const std::vector<chorus::ReduceOp> ops =
        bench_.uses_op ? opt_.ops : std::vector<chorus::ReduceOp>{chorus::ReduceOp::sum};
    // A barrier moves no data: one row, whatever -b/-e/-d say.
    const std::vector<chorus::DataType> dtypes =
        bench_.coll == Coll::barrier ? std::vector<chorus::DataType>{chorus::DataType::uint8}
                                     : opt_.dtypes;
    for (chorus::DataType dtype : dtypes) {
      for (chorus::ReduceOp op : ops) {
        time_test(dtype, op);
      }
    }
    return finish();
  }

 private:
  // Rank 0 opens the --json file before anything runs and tells every rank whether it could:
  // a path that cannot be written fails the whole job at once, not after the sweep.
  void open_json() {
    if (opt_.json_path.empty()) {
      return;
    }
    if (rank_ == 0) {
      const std::string error = report_.open_json();
      store_.set("bench/json_open", std::string_view(error.empty() ? "ok" : error));
      if (!error.empty()) {
        throw OutputError(error);
      }
      return;
    }
    const std::string verdict = store_.get_string("bench/json_open");
    if (verdict != "ok") {
      throw OutputError("stopping because rank 0 " + verdict);
    }
  }

  // Every rank publishes "pid<TAB>host<TAB>device"; rank 0 prints the header with them.
  void header() {
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    store_.set("bench/rank_info/" + std::to_string(rank_),
               std::to_string(::getpid()) + "\t" + host + "\t" + buffers_.memory().describe());
    if (rank_ != 0) {
      return;
    }
    std::vector<std::string> keys;
    for (int r = 0; r < nranks_; ++r) {
      keys.push_back("bench/rank_info/" + std::to_string(r));
    }
    std::vector<RankInfo> ranks;
    for (const auto& value : store_.multi_get(keys)) {
      const std::string info = chorus::to_string(value);
      const auto tab1 = info.find('\t');
      const auto tab2 = info.find('\t', tab1 + 1);
      ranks.push_back(
          {info.substr(0, tab1), info.substr(tab1 + 1, tab2 - tab1 - 1), info.substr(tab2 + 1)});
    }
    report_.header(ranks);
  }

  int finish() {
    std::string json_error;
    if (rank_ == 0) {
      json_error = report_.finish(total_wrong_);
      if (!json_error.empty()) {
        std::fprintf(stderr, "%s: %s\n", bench_.program, json_error.c_str());
      }
      store_.set("bench/total_wrong", std::to_string(total_wrong_));
    }
    // Everyone learns the verdict (and nobody exits, making the launcher stop the others,
    // before rank 0 has printed it).
    const long long total = std::stoll(store_.get_string("bench/total_wrong"));
    group_.barrier()->synchronize();
    if (total > 0) {
      return 1;
    }
    return json_error.empty() ? 0 : 2;
  }

  // ---- one type / op: warmup, then the sweep -----------------------------------------------
  void time_test(chorus::DataType dtype, chorus::ReduceOp op) {
    group_.barrier()->synchronize();
    const int root = bench_.uses_root ? opt_.root : -1;
    for (std::size_t bytes : {opt_.max_bytes, opt_.min_bytes}) {
      const Counts c = bench_.counts(bytes / chorus::element_size(dtype), nranks_);
      WorkList works;
      for (int i = 0; i < opt_.warmup_iters; ++i) {
        issue(c, dtype, op, root, false, works);
      }
      wait_all(works);
    }
    const bool no_data = bench_.coll == Coll::barrier;
    for (std::size_t size = no_data ? 0 : opt_.min_bytes; size <= opt_.max_bytes;) {
      const Counts c = bench_.counts(size / chorus::element_size(dtype), nranks_);
      const std::size_t esize = chorus::element_size(dtype);
      const std::size_t row_bytes = std::max(c.send, c.recv) * esize;
      if (rank_ == 0) {
        report_.begin_row(row_bytes, c.param, no_data ? "none" : type_name(dtype),
                          bench_.uses_op ? op_name(op) : "none", root);
      }
      for (bool in_place : {false, true}) {
        bench_time(c, dtype, op, root, in_place, row_bytes);
      }
      if (rank_ == 0) {
        report_.end_row();
      }
      const std::size_t next =
          opt_.step_factor > 1 ? size * opt_.step_factor : size + opt_.step_bytes;
      if (next <= size || no_data) {
        break;  // -b 0 with -f would never grow; a barrier has one row
      }
      size = next;
    }
  }

  void issue(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root, bool in_place,
             WorkList& works) {
    auto [in, out] = buffers_.views(c, dtype, rank_, in_place);
    const Call call{group_,      in,
                    out,         op,
                    root,        in_place,
                    next_tag_++, bench_.uses_op ? wire_of(opt_.wire, dtype, op) : std::nullopt};
    if (bench_.coll == Coll::sendrecv && nranks_ == 1) {
      // One rank sends to itself (as NCCL allows): a local copy, since send/recv need a peer.
      if (in.nbytes() > 0) {
        buffers_.copy(out.data(), in.data(), in.nbytes());
      }
      return;
    }
    bench_.run(call, works);
  }

  static void wait_all(WorkList& works) {
    for (auto& w : works) {
      w->synchronize();
    }
    works.clear();
  }

  void barrier() { group_.barrier()->synchronize(); }

  Measure measure(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                  bool in_place) {
    Measure m;
    checker_.init_data(c, dtype, op, root, in_place, 99);
    // One op to connect/warm this shape, then line everyone up.
    WorkList works;
    issue(c, dtype, op, root, in_place, works);
    wait_all(works);
    barrier();

    const int total = opt_.iters * opt_.agg_iters;
    // Completion stamps, shared with the then() callbacks (which may outlive this call).
    auto stamps_ptr =
        std::make_shared<std::vector<std::atomic<std::int64_t>>>(static_cast<std::size_t>(total));
    auto& done = *stamps_ptr;
    for (auto& d : done) {
      d.store(-1, std::memory_order_relaxed);
    }
    const auto t0 = Clock::now();
    auto since_t0_ns = [t0] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    };
    auto stamp = [&done, since_t0_ns](int k) {
      done[static_cast<std::size_t>(k)].store(since_t0_ns(), std::memory_order_release);
    };
    // Waiting after each op: its completion is when the wait returns, as a caller sees it (and
    // as a timed loop of blocking calls, e.g. MPI's, measures it). Otherwise the last Work of
    // each issue notes its completion from a then() callback.
    const bool waits_each = opt_.blocking == 1 || opt_.blocking == 2;
    int k = 0;
    for (int iter = 0; iter < opt_.iters; ++iter) {
      for (int a = 0; a < opt_.agg_iters; ++a, ++k) {
        const std::size_t first = works.size();
        issue(c, dtype, op, root, in_place, works);
        if (waits_each) {
          wait_all(works);
          stamp(k);
          if (opt_.blocking == 1) {
            barrier();
          }
        } else if (works.size() > first) {
          auto* slot = &done[static_cast<std::size_t>(k)];
          works.back()->then([slot, since_t0_ns, keep = stamps_ptr](chorus::Work&) {
            slot->store(since_t0_ns(), std::memory_order_release);
          });
        } else {
          stamp(k);
        }
      }
      if (opt_.blocking == 3) {
        wait_all(works);
        barrier();
      }
    }
    wait_all(works);
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    m.time_us = elapsed_s / total * 1e6;
    m.median_us = NAN;
    m.p99_us = NAN;
    // then() callbacks may run just after wait() returns: give them a moment, never forever.
    const auto give_up = Clock::now() + std::chrono::seconds(1);
    std::vector<double> stamps;
    for (auto& d : done) {
      std::int64_t v;
      while ((v = d.load(std::memory_order_acquire)) < 0 && Clock::now() < give_up) {
        std::this_thread::yield();
      }
      if (v < 0) {
        stamps.clear();
        break;
      }
      stamps.push_back(static_cast<double>(v) / 1e3);
    }
    if (!stamps.empty()) {
      std::sort(stamps.begin(), stamps.end());
      std::vector<double> intervals;
      double prev = 0;
      for (double s : stamps) {
        intervals.push_back(s - prev);
        prev = s;
      }
      m.median_us = percentile(intervals, 50);
      m.p99_us = percentile(intervals, 99);
    }
    barrier();

    for (int rep = 0; rep < opt_.check; ++rep) {
      checker_.init_data(c, dtype, op, root, in_place, rep);
      issue(c, dtype, op, root, in_place, works);
      wait_all(works);
      m.wrong += checker_.check_data(c, dtype, op, root, in_place, rep);
      if (m.wrong) {
        break;
      }
    }
    return m;
  }

  double combine(const std::vector<double>& v) const {
    switch (opt_.average) {
      case 0:
        return v[0];
      case 2:
        return *std::min_element(v.begin(), v.end());
      case 3:
        return *std::max_element(v.begin(), v.end());
      default: {
        double s = 0;
        for (double x : v) {
          s += x;
        }
        return s / static_cast<double>(v.size());
      }
    }
  }

  // Measures one half of a row on every rank; rank 0 combines the ranks' numbers and reports.
  void bench_time(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                  bool in_place, std::size_t row_bytes) {
    if (in_place && !bench_.has_in_place) {
      if (rank_ == 0) {
        report_.half_not_applicable();
      }
      return;
    }
    const Measure m = measure(c, dtype, op, root, in_place);
    const std::string key = "bench/row" + std::to_string(row_index_++) + "/";
    char text[160];
    std::snprintf(text, sizeof(text), "%a %a %a %lld", m.time_us, m.median_us, m.p99_us, m.wrong);
    store_.set(key + std::to_string(rank_), std::string(text));
    if (rank_ != 0) {
      total_wrong_ += m.wrong;
      return;
    }
    std::vector<std::string> keys;
    for (int r = 0; r < nranks_; ++r) {
      keys.push_back(key + std::to_string(r));
    }
    std::vector<double> times;
    std::vector<double> medians;
    std::vector<double> p99s;
    long long wrong = 0;
    for (const auto& value : store_.multi_get(keys)) {
      double t = 0;
      double med = 0;
      double p99 = 0;
      long long w = 0;
      std::sscanf(chorus::to_string(value).c_str(), "%la %la %la %lld", &t, &med, &p99, &w);
      times.push_back(t);
      medians.push_back(med);
      p99s.push_back(p99);
      wrong += w;
    }
    total_wrong_ += wrong;
    report_.half(in_place, row_bytes, {combine(times), combine(medians), combine(p99s), wrong});
  }

  const Options& opt_;
  const CollBench& bench_;
  chorus::ProcessGroup& group_;
  chorus::Store& store_;
  int rank_;
  int nranks_;
  RankBuffers buffers_;
  Checker checker_;
  Report report_;
  std::uint32_t next_tag_ = 0;
  int row_index_ = 0;
  long long total_wrong_ = 0;
};

}  // namespace

int run_benchmark(int argc, char** argv, const CollBench& bench) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt;
  try {
    opt = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", bench.program, e.what());
    return 2;
  }
  if (opt.help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  int rank = -1;
  try {
    chorus::InitOptions init;
    if (opt.timeout_s > 0) {
      const chorus::Duration t = std::chrono::seconds(opt.timeout_s);
      init.tcp.group.timeout = t;
      init.nccl.group.timeout = t;
      init.store_timeout = t;
    }
    chorus::World world = chorus::init_world_from_env(opt.backend, init);
    rank = world.group->rank();
    Runner runner(opt, bench, world, argc, argv);
    return runner.run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", bench.program, e.what());
    return 2;
  } catch (const OutputError& e) {
    const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
    std::fprintf(stderr, "%s: %s%s\n", bench.program, who.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // Before the group exists the rank is unknown; the library's message names it anyway.
    const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
    std::fprintf(stderr, "%s: %s%s\n", bench.program, who.c_str(), e.what());
    return 3;
  }
}

}  // namespace bench
