// SPDX-License-Identifier: BSD-3-Clause
// Running launcher and benchmark binaries from tests: fork/exec with merged output, reading
// with a deadline, and killing whatever outlives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace launcher_test {

using Seconds = std::chrono::duration<double>;

struct Process {
  pid_t pid = -1;
  int out_fd = -1;     // stdout and stderr of the process, merged
  std::string output;  // everything read so far
  bool reaped = false;
  int status = 0;  // waitpid status once reaped
};

// Starts argv[0] (a path) with the current environment plus `set` ("NAME=value") minus
// `unset` (names). Its output goes to a pipe that read_until/finish read.
Process start(const std::vector<std::string>& argv, const std::vector<std::string>& set = {},
              const std::vector<std::string>& unset = {});

// Reads output until `needle` has appeared `times` times in it, or the timeout. True if seen.
bool read_until(Process& p, const std::string& needle, int times, Seconds timeout);

// Reads all output and reaps the process, within `timeout`; past it, SIGKILLs the process and
// returns false.
bool finish(Process& p, Seconds timeout);

// start + finish; the process must end within the timeout (else the test fails).
Process run(const std::vector<std::string>& argv, Seconds timeout,
            const std::vector<std::string>& set = {}, const std::vector<std::string>& unset = {});

// Exit code, or 128 + signal, like a shell's $?.
int shell_status(const Process& p);

// Occurrences of `needle` in `text`.
int count(const std::string& text, const std::string& needle);

// A binary's path from an environment variable set by meson (the test fails if unset).
std::string binary(const char* env_name);

// True if the process `pid` no longer exists (not even as a zombie).
bool gone(pid_t pid);

// Launch variables a test's own environment must not pass to the processes it starts.
const std::vector<std::string>& launcher_vars();

}  // namespace launcher_test
