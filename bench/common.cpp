// SPDX-License-Identifier: BSD-3-Clause
// The benchmark runner: init from the environment, sweep sizes, time, check, print, write JSON.
//
// Per row (one size, type, op, root), as nccl-tests does: out-of-place then in-place. Each runs
// one untimed op, a barrier, then -n iterations of -m ops timed on the host (issued back to
// back and waited at the end unless -z), then -c checked ops on fresh patterns. Each rank
// publishes its time and wrong-element count through the store; rank 0 combines them (-a) and
// prints. The store, not the group, carries these numbers so that the nccl backend (whose
// tensors live on the GPU) needs no extra device buffers for bookkeeping.
#include "common.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "memory.hpp"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using WorkList = std::vector<std::shared_ptr<chorus::Work>>;

// "%7.2f" with as many decimals as fit in `width` (nccl-tests' columns).
std::string fixed(double v, int width) {
  char buf[64];
  int power = 0;
  for (double x = 1; v >= x && power < 40; x *= 10) {
    ++power;
  }
  if (power < width - 2) {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, v);
  } else if (power < width - 1) {
    std::snprintf(buf, sizeof(buf), "%*.1f", width, v);
  } else if (power < width + 1) {
    std::snprintf(buf, sizeof(buf), "%*.0f", width, v);
  } else {
    std::snprintf(buf, sizeof(buf), "%*.1e", width, v);
  }
  return buf;
}

// The time column as nccl-tests prints it: 2 decimals below 100 us, 1 below 10 ms, else none.
std::string time_text(double us) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) {
    return "null";
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string now_string() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

double percentile(std::vector<double> v, double pct) {
  if (v.empty()) {
    return NAN;
  }
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::ceil(pct / 100.0 * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

// What one rank measured for one half of a row.
struct Measure {
  double time_us = 0;    // average per op
  double median_us = NAN;  // per-op completion intervals (JSON only)
  double p99_us = NAN;
  long long wrong = 0;
};

class Runner {
 public:
  Runner(const Options& opt, const CollBench& bench, chorus::World& world, int argc, char** argv)
      : opt_(opt),
        bench_(bench),
        world_(world),
        group_(*world.group),
        store_(*world.store),
        rank_(world.group->rank()),
        nranks_(world.group->size()),
        args_(argv, argv + argc) {}

  ~Runner() {
    if (mem_) {
      mem_->release(sendbuf_);
      mem_->release(recvbuf_);
    }
  }

  int run() {
    if (bench_.uses_root && opt_.root >= nranks_) {
      throw UsageError("-r " + std::to_string(opt_.root) + " is not a rank (world size " +
                       std::to_string(nranks_) + ")");
    }
    mem_ = make_memory(opt_.backend, world_.launch.local_rank);
    buf_bytes_ = std::max<std::size_t>(opt_.max_bytes, 64);
    sendbuf_ = mem_->alloc(buf_bytes_);
    recvbuf_ = mem_->alloc(buf_bytes_);
    stage_.resize(buf_bytes_);
    start_time_ = now_string();
    print_header();
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
  // ---- header and footer -------------------------------------------------------------------
  void print_header() {
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    // "pid<TAB>host<TAB>device": rank 0 prints nccl-tests' device line and the JSON record.
    store_.set("bench/rank_info/" + std::to_string(rank_),
               std::to_string(::getpid()) + "\t" + host + "\t" + mem_->describe());
    if (rank_ != 0) {
      return;
    }
    std::vector<std::string> keys;
    for (int r = 0; r < nranks_; ++r) {
      keys.push_back("bench/rank_info/" + std::to_string(r));
    }
    const auto infos = store_.multi_get(keys);
    const bool factor = opt_.step_factor > 1;
    std::printf("# chorus %s benchmark (nccl-tests conventions), backend %s, launcher %s\n",
                chorus::version(), chorus::to_string(opt_.backend), world_.launch.launcher.c_str());
    std::printf("# Collective test starting: %s\n", bench_.program);
    std::printf(
        "# nRanks %d nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
        "iters: %d agg iters: %d validation: %d blocking: %d\n",
        nranks_, opt_.nthreads, opt_.ngpus, opt_.min_bytes, opt_.max_bytes,
        factor ? opt_.step_factor : opt_.step_bytes, factor ? "factor" : "bytes", opt_.warmup_iters,
        opt_.iters, opt_.agg_iters, opt_.check, opt_.blocking);
    static const char* kAverage[] = {"rank 0's", "averaged across ranks", "the minimum across ranks",
                                     "the maximum across ranks"};
    std::printf("# time: average of one op over %d x %d ops on each rank; reported: %s (-a %d)\n",
                opt_.iters, opt_.agg_iters, kAverage[opt_.average], opt_.average);
    std::printf("#\n# Using devices\n");
    json_devices_ = "[";
    for (int r = 0; r < nranks_; ++r) {
      const std::string info = chorus::to_string(infos[static_cast<std::size_t>(r)]);
      const auto tab1 = info.find('\t');
      const auto tab2 = info.find('\t', tab1 + 1);
      const std::string pid = info.substr(0, tab1);
      const std::string rhost = info.substr(tab1 + 1, tab2 - tab1 - 1);
      const std::string device = info.substr(tab2 + 1);
      std::printf("#  Rank %2d Group  0 Pid %6s on %10s device %s\n", r, pid.c_str(), rhost.c_str(),
                  device.c_str());
      json_devices_ += std::string(r ? "," : "") + "{\"rank\":" + std::to_string(r) +
                       ",\"pid\":" + pid + ",\"hostname\":" + json_string(rhost) +
                       ",\"device\":" + json_string(device) + "}";
    }
    json_devices_ += "]";
    std::printf("#\n");
    std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
                "", "", "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
                "");
    std::fflush(stdout);
  }

  int finish() {
    const double avg_bw = bw_count_ > 0 ? bw_sum_ / bw_count_ : 0.0;
    if (rank_ == 0) {
      std::printf("# %-20s : %lld %s\n", "Out of bounds values", total_wrong_,
                  total_wrong_ ? "FAILED" : "OK");
      std::printf("# %-20s : %g \n", "Avg bus bandwidth", avg_bw);
      std::printf("#\n# Collective test concluded: %s\n", bench_.program);
      std::fflush(stdout);
      if (!opt_.json_path.empty()) {
        write_json(avg_bw);
      }
      store_.set("bench/total_wrong", std::to_string(total_wrong_));
    }
    // Everyone learns the verdict (and nobody exits, making the launcher stop the others,
    // before rank 0 has printed it).
    const long long total = std::stoll(store_.get_string("bench/total_wrong"));
    group_.barrier()->synchronize();
    return total > 0 ? 1 : 0;
  }

  void write_json(double avg_bw) {
    static const char* kCombined[] = {"rank0", "average", "min", "max"};
    std::FILE* f = std::fopen(opt_.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", bench_.program, opt_.json_path.c_str(),
                   std::strerror(errno));
      return;
    }
    std::string args = "[";
    for (std::size_t i = 0; i < args_.size(); ++i) {
      args += (i ? "," : "") + json_string(args_[i]);
    }
    args += "]";
    std::string ops = "[";
    for (std::size_t i = 0; i < opt_.ops.size(); ++i) {
      ops += (i ? "," : "") + json_string(op_name(opt_.ops[i]));
    }
    ops += "]";
    std::string types = "[";
    for (std::size_t i = 0; i < opt_.dtypes.size(); ++i) {
      types += (i ? "," : "") + json_string(type_name(opt_.dtypes[i]));
    }
    types += "]";
    std::fprintf(f, "{\"benchmark\":%s,\"chorus_version\":%s,\"chorus_headers_version\":%s,",
                 json_string(bench_.program).c_str(), json_string(chorus::version()).c_str(),
                 json_string(CHORUS_VERSION_STRING).c_str());
    std::fprintf(f, "\"start_time\":%s,\"end_time\":%s,\"args\":%s,", json_string(start_time_).c_str(),
                 json_string(now_string()).c_str(), args.c_str());
    std::fprintf(f,
                 "\"config\":{\"backend\":%s,\"launcher\":%s,\"nranks\":%d,\"minimum_bytes\":%zu,"
                 "\"maximum_bytes\":%zu,\"%s\":%zu,\"warmup_iters\":%d,\"iterations\":%d,"
                 "\"aggregated_iterations\":%d,\"validation\":%d,\"blocking\":%d,\"average\":%d,"
                 "\"timeout_s\":%d,\"ops\":%s,\"datatypes\":%s,\"root\":%d,"
                 "\"time\":\"average of one op over the iterations on each rank\","
                 "\"combined_across_ranks\":\"%s\",\"gb\":1e9},",
                 json_string(chorus::to_string(opt_.backend)).c_str(),
                 json_string(world_.launch.launcher).c_str(), nranks_, opt_.min_bytes,
                 opt_.max_bytes, opt_.step_factor > 1 ? "step_factor" : "step_bytes",
                 opt_.step_factor > 1 ? opt_.step_factor : opt_.step_bytes, opt_.warmup_iters,
                 opt_.iters, opt_.agg_iters, opt_.check, opt_.blocking, opt_.average,
                 opt_.timeout_s, ops.c_str(), types.c_str(), opt_.root,
                 kCombined[opt_.average]);
    std::fprintf(f, "\"devices\":%s,\"results\":[", json_devices_.c_str());
    for (std::size_t i = 0; i < json_rows_.size(); ++i) {
      std::fprintf(f, "%s%s", i ? "," : "", json_rows_[i].c_str());
    }
    std::fprintf(f,
                 "],\"out_of_bounds\":{\"count\":%lld,\"okay\":%s},"
                 "\"average_bus_bandwidth\":%s}\n",
                 total_wrong_, total_wrong_ ? "false" : "true", json_number(avg_bw).c_str());
    std::fclose(f);
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
      std::string row;
      if (rank_ == 0) {
        std::printf("%12zu  %12zu  %8s  %6s  %6d", row_bytes, c.param, no_data ? "none" : type_name(dtype),
                    bench_.uses_op ? op_name(op) : "none", root);
        std::fflush(stdout);
        char head[256];
        std::snprintf(head, sizeof(head),
                      "{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d",
                      row_bytes, c.param, no_data ? "none" : type_name(dtype),
                      bench_.uses_op ? op_name(op) : "none",
                      root);
        row = head;
      }
      for (bool in_place : {false, true}) {
        bench_time(c, dtype, op, root, in_place, row_bytes, row);
      }
      if (rank_ == 0) {
        std::printf("\n");
        std::fflush(stdout);
        json_rows_.push_back(row + "}");
      }
      const std::size_t next = opt_.step_factor > 1 ? size * opt_.step_factor : size + opt_.step_bytes;
      if (next <= size || no_data) {
        break;  // -b 0 with -f would never grow; a barrier has one row
      }
      size = next;
    }
  }

  // The input and output views for one issue.
  std::pair<chorus::Tensor, chorus::Tensor> views(const Counts& c, chorus::DataType dtype,
                                                  bool in_place) const {
    const std::size_t esize = chorus::element_size(dtype);
    auto* recv = static_cast<std::uint8_t*>(recvbuf_);
    const auto r = static_cast<std::size_t>(rank_);
    void* in = in_place ? recv + c.send_inplace_offset * r * esize : sendbuf_;
    void* out = in_place ? recv + c.recv_inplace_offset * r * esize : recvbuf_;
    return {chorus::Tensor(in, c.send, dtype, mem_->device()),
            chorus::Tensor(out, c.recv, dtype, mem_->device())};
  }

  void issue(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root, bool in_place,
             WorkList& works) {
    auto [in, out] = views(c, dtype, in_place);
    const Call call{group_, in, out, op, root, in_place, next_tag_++};
    if (bench_.coll == Coll::sendrecv && nranks_ == 1) {
      // One rank sends to itself (as NCCL allows): a local copy, since send/recv need a peer.
      if (in.nbytes() > 0) {
        stage_copy(out.data(), in.data(), in.nbytes());
      }
      return;
    }
    bench_.run(call, works);
  }

  void stage_copy(void* dst, const void* src, std::size_t bytes) {
    mem_->to_host(stage_.data(), src, bytes);
    mem_->to_device(dst, stage_.data(), bytes);
  }

  static void wait_all(WorkList& works) {
    for (auto& w : works) {
      w->synchronize();
    }
    works.clear();
  }

  void barrier() { group_.barrier()->synchronize(); }

  // Writes this rank's input pattern (and a sentinel in the rest of the output buffer).
  void init_data(const Counts& c, chorus::DataType dtype, int root, bool in_place, int seed,
                 chorus::ReduceOp op) {
    const std::size_t esize = chorus::element_size(dtype);
    const Pattern p = pattern(dtype, op, seed);
    auto [in, out] = views(c, dtype, in_place);
    // Sentinel: an output the op forgot to write never matches an expected value.
    std::memset(stage_.data(), 0xA5, buf_bytes_);
    mem_->to_device(recvbuf_, stage_.data(), buf_bytes_);
    for (std::size_t i = 0; i < c.send; ++i) {
      store_value(dtype, bench_.input(p, rank_, root, i, c), stage_.data() + i * esize);
    }
    if (c.send > 0) {
      mem_->to_device(in.data(), stage_.data(), c.send * esize);
    }
  }

  Pattern pattern(chorus::DataType dtype, chorus::ReduceOp op, int seed) const {
    Pattern p;
    p.dtype = dtype;
    if (bench_.uses_op) {
      p.op = op;
    }
    p.nranks = nranks_;
    p.seed = seed;
    return p;
  }

  // Checks the output of the op just completed; returns the wrong element count.
  long long check_data(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                       bool in_place, int seed) {
    const std::size_t esize = chorus::element_size(dtype);
    const Pattern p = pattern(dtype, op, seed);
    auto [in, out] = views(c, dtype, in_place);
    // Broadcast out of place: the root's data stays in its input buffer.
    const chorus::Tensor result =
        (bench_.coll == Coll::broadcast && !in_place && rank_ == root) ? in : out;
    if (rank_ == opt_.corrupt_rank && result.count() > 0 &&
        bench_.expected(p, rank_, root, in_place, result.count() / 2, c)) {
      // Test hook: flip the lowest bit of one output element, as a faulty backend would.
      auto* elem = static_cast<std::uint8_t*>(result.data()) + (result.count() / 2) * esize;
      std::uint8_t byte = 0;
      mem_->to_host(&byte, elem, 1);
      byte ^= 1u;
      mem_->to_device(elem, &byte, 1);
    }
    if (result.count() == 0) {
      return 0;
    }
    mem_->to_host(stage_.data(), result.data(), result.count() * esize);
    long long wrong = 0;
    std::uint8_t expected[8];
    for (std::size_t i = 0; i < result.count(); ++i) {
      const auto want = bench_.expected(p, rank_, root, in_place, i, c);
      if (!want) {
        continue;
      }
      store_value(dtype, *want, expected);
      const std::uint8_t* got = stage_.data() + i * esize;
      if (std::memcmp(got, expected, esize) != 0) {
        if (wrong < 3) {
          std::fprintf(stderr,
                       "%s: rank %d: %s %s %s element %zu is %.9g, expected %.9g\n", bench_.program,
                       rank_, in_place ? "in-place" : "out-of-place", type_name(dtype),
                       bench_.uses_op ? op_name(op) : "", i, load_value(dtype, got),
                       static_cast<double>(*want));
        }
        ++wrong;
      }
    }
    return wrong;
  }

  Measure measure(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                  bool in_place) {
    Measure m;
    init_data(c, dtype, root, in_place, 99, op);
    // One op to connect/warm this shape, then line everyone up.
    WorkList works;
    issue(c, dtype, op, root, in_place, works);
    wait_all(works);
    barrier();

    const int total = opt_.iters * opt_.agg_iters;
    // Completion stamps, shared with the then() callbacks (which may outlive this call).
    auto stamps_ptr = std::make_shared<std::vector<std::atomic<std::int64_t>>>(
        static_cast<std::size_t>(total));
    auto& done = *stamps_ptr;
    for (auto& d : done) {
      d.store(-1, std::memory_order_relaxed);
    }
    const auto t0 = Clock::now();
    int k = 0;
    for (int iter = 0; iter < opt_.iters; ++iter) {
      for (int a = 0; a < opt_.agg_iters; ++a, ++k) {
        const std::size_t first = works.size();
        issue(c, dtype, op, root, in_place, works);
        if (works.size() > first) {
          // The last Work of this issue completes it; note when.
          auto* slot = &done[static_cast<std::size_t>(k)];
          works.back()->then([slot, t0, keep = stamps_ptr](chorus::Work&) {
            slot->store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count(),
                        std::memory_order_release);
          });
        } else {
          done[static_cast<std::size_t>(k)].store(
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        }
        if (opt_.blocking == 1 || opt_.blocking == 2) {
          wait_all(works);
          if (opt_.blocking == 1) {
            barrier();
          }
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
      init_data(c, dtype, root, in_place, rep, op);
      issue(c, dtype, op, root, in_place, works);
      wait_all(works);
      m.wrong += check_data(c, dtype, op, root, in_place, rep);
      if (m.wrong) {
        break;
      }
    }
    return m;
  }

  double combine(const std::vector<double>& v) const {
    switch (opt_.average) {
      case 0: return v[0];
      case 2: return *std::min_element(v.begin(), v.end());
      case 3: return *std::max_element(v.begin(), v.end());
      default: {
        double s = 0;
        for (double x : v) {
          s += x;
        }
        return s / static_cast<double>(v.size());
      }
    }
  }

  void bench_time(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                  bool in_place, std::size_t row_bytes, std::string& row) {
    if (in_place && !bench_.has_in_place) {
      if (rank_ == 0) {
        std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        row += ",\"in_place\":null";
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
    const double time_us = combine(times);
    const double algbw = time_us > 0 ? static_cast<double>(row_bytes) / 1e9 / (time_us / 1e6) : 0;
    const double busbw = algbw * busbw_factor(bench_.coll, nranks_);
    total_wrong_ += wrong;
    bw_sum_ += busbw;
    ++bw_count_;
    if (opt_.check > 0) {
      std::printf("  %7s  %6s  %6s  %6lld", time_text(time_us).c_str(), fixed(algbw, 6).c_str(),
                  fixed(busbw, 6).c_str(), wrong);
    } else {
      std::printf("  %7s  %6s  %6s  %6s", time_text(time_us).c_str(), fixed(algbw, 6).c_str(),
                  fixed(busbw, 6).c_str(), "N/A");
    }
    std::fflush(stdout);
    row += std::string(",\"") + (in_place ? "in_place" : "out_of_place") + "\":{\"time_us\":" +
           json_number(time_us) + ",\"median_us\":" + json_number(combine(medians)) +
           ",\"p99_us\":" + json_number(combine(p99s)) + ",\"algbw_gbs\":" + json_number(algbw) +
           ",\"busbw_gbs\":" + json_number(busbw) + ",\"nwrong\":" +
           (opt_.check > 0 ? std::to_string(wrong) : std::string("null")) + "}";
  }

  const Options& opt_;
  const CollBench& bench_;
  chorus::World& world_;
  chorus::ProcessGroup& group_;
  chorus::Store& store_;
  int rank_;
  int nranks_;
  std::vector<std::string> args_;
  std::unique_ptr<Memory> mem_;
  void* sendbuf_ = nullptr;
  void* recvbuf_ = nullptr;
  std::size_t buf_bytes_ = 0;
  std::vector<std::uint8_t> stage_;  // host copy for init and check
  std::uint32_t next_tag_ = 0;
  int row_index_ = 0;
  double bw_sum_ = 0;
  int bw_count_ = 0;
  long long total_wrong_ = 0;
  std::string start_time_;
  std::string json_devices_;
  std::vector<std::string> json_rows_;
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
  } catch (const std::exception& e) {
    // Before the group exists the rank is unknown; the library's message names it anyway.
    const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
    std::fprintf(stderr, "%s: %s%s\n", bench.program, who.c_str(), e.what());
    return 3;
  }
}

}  // namespace bench
