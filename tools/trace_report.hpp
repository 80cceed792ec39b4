// SPDX-License-Identifier: BSD-3-Clause
// chorus-trace's analysis: reads every rank's flight recorder dump (docs/flight_recorder.md)
// and says what happened: the first failure and where, the rank every other rank's failure
// names, the ranks that fell behind, ops that differ between ranks at one sequence number,
// ranks that never reported, then each rank's last ops. Separate from main() so tests can run it on
// real dumps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::trace_tool {

struct OpRecord {
  std::uint64_t seq = 0;
  bool p2p = false;
  std::string op, dtype, algorithm, state, error;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  int root = -1;
  int peer = -1;
  std::int64_t issued_us = 0, started_us = 0, ended_us = 0;
};

// One group as one process saw it.
struct GroupView {
  std::string file;  // the dump it came from
  std::string reason;
  std::string host;
  long long pid = 0;
  std::string name;
  int rank = 0;
  int size = 1;
  std::uint64_t recorded = 0;
  std::string failure;
  std::int64_t failure_us = 0;
  std::vector<int> failure_peers;  // ranks the failure names
  std::vector<OpRecord> ops;       // oldest first
};

// The largest dump load_dumps reads by default (a group's dump of the default 2048 entries is
// well under 1 MiB).
inline constexpr std::uint64_t kDefaultMaxDumpBytes = std::uint64_t{256} << 20;

// Reads every *.json in `dir`. Files that are not flight recorder dumps are listed in
// `problems` (and skipped) rather than failing the whole report. A file is recognized by its
// first 4 KiB before the rest is read, so another file costs at most that, whatever its size;
// a dump larger than `max_dump_bytes` is skipped unread, with its size and the bound.
std::vector<GroupView> load_dumps(const std::string& dir, std::vector<std::string>& problems,
                                  std::uint64_t max_dump_bytes = kDefaultMaxDumpBytes);
// Parses one dump document (the text of a file).
std::vector<GroupView> parse_dump(const std::string& text, const std::string& file);

// The report, for the last `last_ops` ops of each rank.
std::string report(const std::vector<GroupView>& views, std::size_t last_ops);

}  // namespace chorus::trace_tool
