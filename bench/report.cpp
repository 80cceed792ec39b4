// SPDX-License-Identifier: BSD-3-Clause
// nccl-tests' table and the --json record (column formats as nccl-tests prints them).
#include "report.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

namespace bench {
namespace {

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

std::string json_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += (i ? "," : "") + json_string(items[i]);
  }
  return out + "]";
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
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

Report::Report(const Options& opt, const CollBench& bench, std::string launcher, int nranks,
               std::vector<std::string> args)
    : opt_(opt),
      bench_(bench),
      launcher_(std::move(launcher)),
      nranks_(nranks),
      args_(std::move(args)),
      start_time_(now_string()) {}

Report::~Report() {
  if (json_ != nullptr) {
    std::fclose(json_);
  }
}

std::string Report::open_json() {
  if (opt_.json_path.empty()) {
    return {};
  }
  json_ = std::fopen(opt_.json_path.c_str(), "w");
  if (json_ == nullptr) {
    return "cannot write the --json file " + opt_.json_path + ": " + std::strerror(errno) +
           "; give a path in a writable directory (nothing was run)";
  }
  return {};
}

void Report::header(const std::vector<RankInfo>& ranks) {
  const bool factor = opt_.step_factor > 1;
  std::printf("# chorus %s benchmark (nccl-tests conventions), backend %s, launcher %s\n",
              chorus::version(), chorus::to_string(opt_.backend), launcher_.c_str());
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
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankInfo& info = ranks[r];
    std::printf("#  Rank %2zu Group  0 Pid %6s on %10s device %s\n", r, info.pid.c_str(),
                info.host.c_str(), info.device.c_str());
    json_devices_ += std::string(r ? "," : "") + "{\"rank\":" + std::to_string(r) +
                     ",\"pid\":" + info.pid + ",\"hostname\":" + json_string(info.host) +
                     ",\"device\":" + json_string(info.device) + "}";
  }
  json_devices_ += "]";
  std::printf("#\n");
  std::printf(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
      "", "", "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "");
  std::fflush(stdout);
}

void Report::begin_row(std::size_t bytes, std::size_t count, const char* type, const char* redop,
                       int root) {
  std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, redop, root);
  std::fflush(stdout);
  char head[256];
  std::snprintf(head, sizeof(head),
                "{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d", bytes,
                count, type, redop, root);
  row_ = head;
}

void Report::half(bool in_place, std::size_t row_bytes, const HalfResult& r) {
  const double algbw = r.time_us > 0 ? static_cast<double>(row_bytes) / 1e9 / (r.time_us / 1e6) : 0;
  const double busbw = algbw * busbw_factor(bench_.coll, nranks_);
  bw_sum_ += busbw;
  ++bw_count_;
  if (opt_.check > 0) {
    std::printf("  %7s  %6s  %6s  %6lld", time_text(r.time_us).c_str(), fixed(algbw, 6).c_str(),
                fixed(busbw, 6).c_str(), r.wrong);
  } else {
    std::printf("  %7s  %6s  %6s  %6s", time_text(r.time_us).c_str(), fixed(algbw, 6).c_str(),
                fixed(busbw, 6).c_str(), "N/A");
  }
  std::fflush(stdout);
  row_ += std::string(",\"") + (in_place ? "in_place" : "out_of_place") +
          "\":{\"time_us\":" + json_number(r.time_us) +
          ",\"median_us\":" + json_number(r.median_us) + ",\"p99_us\":" + json_number(r.p99_us) +
          ",\"algbw_gbs\":" + json_number(algbw) + ",\"busbw_gbs\":" + json_number(busbw) +
          ",\"nwrong\":" + (opt_.check > 0 ? std::to_string(r.wrong) : std::string("null")) + "}";
}

void Report::half_not_applicable() {
  std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  row_ += ",\"in_place\":null";
}

void Report::end_row() {
  std::printf("\n");
  std::fflush(stdout);
  json_rows_.push_back(row_ + "}");
  row_.clear();
}

std::string Report::finish(long long total_wrong) {
  const double avg_bw = bw_count_ > 0 ? bw_sum_ / bw_count_ : 0.0;
  std::printf("# %-20s : %lld %s\n", "Out of bounds values", total_wrong,
              total_wrong ? "FAILED" : "OK");
  std::printf("# %-20s : %g \n", "Avg bus bandwidth", avg_bw);
  std::printf("#\n# Collective test concluded: %s\n", bench_.program);
  std::fflush(stdout);
  if (json_ == nullptr) {
    return {};
  }
  std::vector<std::string> ops;
  for (chorus::ReduceOp op : opt_.ops) {
    ops.emplace_back(op_name(op));
  }
  std::vector<std::string> types;
  for (chorus::DataType t : opt_.dtypes) {
    types.emplace_back(type_name(t));
  }
  static const char* kCombined[] = {"rank0", "average", "min", "max"};
  std::FILE* f = json_;
  std::fprintf(f, "{\"benchmark\":%s,\"chorus_version\":%s,\"chorus_headers_version\":%s,",
               json_string(bench_.program).c_str(), json_string(chorus::version()).c_str(),
               json_string(CHORUS_VERSION_STRING).c_str());
  std::fprintf(f, "\"start_time\":%s,\"end_time\":%s,\"args\":%s,",
               json_string(start_time_).c_str(), json_string(now_string()).c_str(),
               json_list(args_).c_str());
  std::fprintf(
      f,
      "\"config\":{\"backend\":%s,\"launcher\":%s,\"nranks\":%d,\"minimum_bytes\":%zu,"
      "\"maximum_bytes\":%zu,\"%s\":%zu,\"warmup_iters\":%d,\"iterations\":%d,"
      "\"aggregated_iterations\":%d,\"validation\":%d,\"blocking\":%d,\"average\":%d,"
      "\"timeout_s\":%d,\"local_register\":%d,\"ops\":%s,\"datatypes\":%s,\"root\":%d,"
      "\"time\":\"average of one op over the iterations on each rank\","
      "\"combined_across_ranks\":\"%s\",\"gb\":1e9},",
      json_string(chorus::to_string(opt_.backend)).c_str(), json_string(launcher_).c_str(), nranks_,
      opt_.min_bytes, opt_.max_bytes, opt_.step_factor > 1 ? "step_factor" : "step_bytes",
      opt_.step_factor > 1 ? opt_.step_factor : opt_.step_bytes, opt_.warmup_iters, opt_.iters,
      opt_.agg_iters, opt_.check, opt_.blocking, opt_.average, opt_.timeout_s, opt_.registered,
      json_list(ops).c_str(), json_list(types).c_str(), opt_.root, kCombined[opt_.average]);
  std::fprintf(f, "\"devices\":%s,\"results\":[", json_devices_.c_str());
  for (std::size_t i = 0; i < json_rows_.size(); ++i) {
    std::fprintf(f, "%s%s", i ? "," : "", json_rows_[i].c_str());
  }
  std::fprintf(f,
               "],\"out_of_bounds\":{\"count\":%lld,\"okay\":%s},"
               "\"average_bus_bandwidth\":%s}\n",
               total_wrong, total_wrong ? "false" : "true", json_number(avg_bw).c_str());
  const bool write_failed = std::ferror(f) != 0;
  json_ = nullptr;
  // fclose reports what buffered writes could not store (a full disk, a quota, NFS).
  if (std::fclose(f) != 0 || write_failed) {
    return "could not write the --json file " + opt_.json_path + ": " + std::strerror(errno);
  }
  return {};
}

}  // namespace bench
