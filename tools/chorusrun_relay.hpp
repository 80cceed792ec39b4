// SPDX-License-Identifier: BSD-3-Clause
// chorusrun's output relay: each rank's stdout and stderr arrive through pipes and leave as
// whole lines (one write() each, so lines of different ranks never interleave), copied to the
// rank's log file and to chorusrun's own stdout or stderr. The relay decides which lines get a
// "[rank N] " prefix (PrefixMode).
#pragma once

#include <string>
#include <string_view>

#include "chorusrun_args.hpp"

namespace chorusrun {

// Writes all of data, retrying EINTR; gives up silently when the reader is gone (EPIPE): the
// ranks' output is dropped, the run goes on.
void write_all(int fd, std::string_view data);

// chorusrun's own message: "chorusrun: <text>" on stderr.
void say(const std::string& text);

// One output stream of one rank.
struct OutputStream {
  int fd = -1;          // read end of the pipe (non-blocking); -1 once closed
  int console = 1;      // 1 or 2; -1: not shown (redirected to the log only)
  int log = -1;         // log file or -1
  std::string partial;  // bytes after the last newline
};

class Relay {
 public:
  explicit Relay(PrefixMode mode) : mode_(mode) {}

  // Reads what is in the pipe now and emits every complete line; at EOF emits the rest and
  // closes the pipe. Returns false once the pipe is closed.
  bool drain(int rank, OutputStream& s);
  // Drains and closes the pipe (without waiting for EOF) and the log file.
  void close(int rank, OutputStream& s);

 private:
  static constexpr std::size_t kMaxLine = 64 * 1024;  // a longer line without newline is cut
  void feed(int rank, OutputStream& s, std::string_view data);
  void finish(int rank, OutputStream& s);
  void emit(int rank, const OutputStream& s, std::string_view line);
  bool prefixed(int rank, int console);

  PrefixMode mode_;
  // Per console stream (index 1 stdout, 2 stderr): the first rank that wrote to it, and
  // whether another rank has written to it since (then every later line is prefixed).
  int first_writer_[3] = {-1, -1, -1};
  bool shared_[3] = {false, false, false};
};

}  // namespace chorusrun
