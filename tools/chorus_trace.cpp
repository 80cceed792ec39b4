// SPDX-License-Identifier: BSD-3-Clause
// chorus-trace DIR: what happened in a failed or hung job, from every rank's flight recorder
// dump (CHORUS_TRACE_DIR; collect each host's files into one folder first).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "trace_report.hpp"

namespace {

constexpr const char* kUsage =
    "usage: chorus-trace [--last N] [--max-dump-mib M] DIR\n"
    "\n"
    "Reads the flight recorder dumps (*.json) that chorus ranks write on a timeout, a peer\n"
    "failure, an abort or SIGUSR1 (see CHORUS_TRACE_DIR) and prints, per process group: the\n"
    "first failure, ranks that never reported, ranks that fell behind, ops that differ between\n"
    "ranks at one sequence number, then each rank's last N ops (default 8).\n"
    "\n"
    "Other files are recognized by their first 4 KiB and skipped unread; a dump larger than M\n"
    "MiB (default 256) is skipped with its size.\n";

}  // namespace

int main(int argc, char** argv) try {
  std::size_t last_ops = 8;
  std::uint64_t max_dump_bytes = chorus::trace_tool::kDefaultMaxDumpBytes;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--last" && i + 1 < argc) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || n < 1 || n > 1000000) {
        std::cerr << "chorus-trace: --last needs a number of ops in [1, 1000000], got '" << argv[i]
                  << "'\n";
        return 2;
      }
      last_ops = static_cast<std::size_t>(n);
    } else if (arg == "--max-dump-mib" && i + 1 < argc) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || n < 1 || n > (1L << 20)) {
        std::cerr << "chorus-trace: --max-dump-mib needs a size in MiB in [1, 1048576], got '"
                  << argv[i] << "'\n";
        return 2;
      }
      max_dump_bytes = static_cast<std::uint64_t>(n) << 20;
    } else if (!arg.empty() && arg[0] == '-') {
      std::cerr << "chorus-trace: unknown option '" << arg << "'\n" << kUsage;
      return 2;
    } else if (dir.empty()) {
      dir = arg;
    } else {
      std::cerr << "chorus-trace: one directory only\n" << kUsage;
      return 2;
    }
  }
  if (dir.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::cerr << "chorus-trace: " << dir << " is not a directory\n";
    return 2;
  }
  std::vector<std::string> problems;
  const auto views = chorus::trace_tool::load_dumps(dir, problems, max_dump_bytes);
  for (const auto& p : problems) {
    std::cerr << "chorus-trace: " << p << "\n";
  }
  if (views.empty()) {
    std::cerr << "chorus-trace: no flight recorder dumps in " << dir << "\n";
    return 1;
  }
  std::cout << chorus::trace_tool::report(views, last_ops);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "chorus-trace: " << e.what() << "\n";
  return 1;
}
