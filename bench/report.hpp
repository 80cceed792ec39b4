// SPDX-License-Identifier: BSD-3-Clause
// What rank 0 reports: nccl-tests' table on stdout (header, one line per row with the
// out-of-place and in-place halves, footer) and the --json record of the same numbers.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "common.hpp"

namespace bench {

// JSON text helpers (shared with nothing else; exposed for the report's users).
std::string json_string(const std::string& s);
std::string json_number(double v);  // null for NaN and infinities
// "2026-12-01 07:11:39", local time.
std::string now_string();

// One rank's line of the "# Using devices" block.
struct RankInfo {
  std::string pid;
  std::string host;
  std::string device;
};

// One half (out of place or in place) of a row, already combined across ranks (-a).
struct HalfResult {
  double time_us = 0;
  double median_us = 0;
  double p99_us = 0;
  long long wrong = 0;
};

class Report {
 public:
  Report(const Options& opt, const CollBench& bench, std::string launcher, int nranks,
         std::vector<std::string> args);
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  // Opens the --json file (when asked for) now, so that an unwritable path fails before the
  // sweep rather than after it. Returns "" or what went wrong, as a sentence.
  std::string open_json();

  void header(const std::vector<RankInfo>& ranks);
  void begin_row(std::size_t bytes, std::size_t count, const char* type, const char* redop,
                 int root);
  void half(bool in_place, std::size_t row_bytes, const HalfResult& r);
  void half_not_applicable();  // the in-place columns of an op without an in-place form
  void end_row();
  // The footer, and the JSON record when asked for. Returns "" or why the JSON file could not
  // be written.
  std::string finish(long long total_wrong);

 private:
  const Options& opt_;
  const CollBench& bench_;
  std::string launcher_;
  int nranks_;
  std::vector<std::string> args_;
  std::string start_time_;
  std::FILE* json_ = nullptr;
  std::string json_devices_;
  std::vector<std::string> json_rows_;
  std::string row_;
  double bw_sum_ = 0;
  int bw_count_ = 0;
};

}  // namespace bench
