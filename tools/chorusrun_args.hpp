// SPDX-License-Identifier: BSD-3-Clause
// chorusrun's command line: torchrun-compatible flags, parsed into RunArgs (no side effects).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace chorusrun {

// Which of a rank's streams a flag applies to, as torchrun numbers them.
enum StreamMask : int { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

// When a line on chorusrun's stdout or stderr gets a "[rank N] " prefix.
enum class PrefixMode {
  // Once a second rank writes to that stream (with a note naming the first writer). A stream
  // only one rank writes to, such as rank 0's benchmark table, stays exactly as it wrote it.
  automatic,
  always,  // --prefix
  never,   // --no-prefix
};

// Where each local rank may run (--bind-to).
enum class BindTo {
  none,  // wherever the kernel puts it, within chorusrun's own CPUs
  core,  // on whole cores of its own: chorusrun's cores split evenly (chorusrun_bind.hpp)
};

struct RunArgs {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;  // one node, store on a free port of 127.0.0.1
  int max_restarts = 0;
  // --elastic: a rank that fails does not stop the others while at least min_ranks still run
  // or have finished (they shrink their groups: ProcessGroup::shrink); the job succeeds if at
  // least min_ranks ranks exit 0. max_restarts then counts ranks restarted as joiners of the
  // running job (ProcessGroup::grow), not restarts of the whole job. One node only for now.
  bool elastic = false;
  int min_ranks = 1;
  std::string token_file;        // the job's store token (first line)
  std::string log_dir;           // per-rank logs: <log_dir>/attempt_<k>/<rank>/{stdout,stderr}.log
  int tee = -1;                  // streams copied to the log files as well as the console
  int redirects = -1;            // streams sent to the log files only
  double kill_timeout_s = 10.0;  // SIGTERM -> SIGKILL grace period
  PrefixMode prefix = PrefixMode::automatic;  // "[rank N] " before a rank's output lines
  BindTo bind = BindTo::none;
  bool help = false;
  bool help_env = false;
  bool version = false;
  std::vector<std::string> program;  // program and its arguments
  // As torchrun: a PROGRAM ending in ".py" runs under Python ($CHORUS_PYTHON, else python3 on
  // PATH) unless --no-python says to run it as it is.
  bool no_python = false;
};

// A bad command line; what() says which flag and what is expected.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses argv[1..argc). Throws UsageError. "--flag=value" and "--flag value" both work; "_" and
// "-" are interchangeable in long flag names (--nproc_per_node); "--" ends the options; the
// first non-option word is the program and everything after it is its arguments.
RunArgs parse_args(int argc, const char* const* argv);

// The --help text.
const char* usage();

}  // namespace chorusrun
