// SPDX-License-Identifier: BSD-3-Clause
// Flight recorder dumps: every live group's FlightRecorder in this process, written as one JSON
// file per process (docs/flight_recorder.md) when a group fails (timeout, peer failure, abort,
// mismatch) and on SIGUSR1. `chorus-trace DIR` reads the files of every rank.
//
//   CHORUS_TRACE_BUFFER  entries kept per group (default 2048; 0 turns the recorder off)
//   CHORUS_TRACE_DIR     where dumps go (default <temp dir>/chorus-trace-<uid>-<run id>, used
//                        only if it is this uid's own and private: open_dump_directory())
//
// The file is <dir>/rank<RANK>.json (RANK from the launcher), or pid<pid>.json without one;
// each dump replaces the previous one of this process (written to a temporary name, then
// renamed, so a reader never sees half a file).
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/flight_recorder.hpp"

namespace chorus::trace {

// CHORUS_TRACE_BUFFER, validated (InvalidArgument names the variable and its value).
std::size_t buffer_entries();
// CHORUS_TRACE_DIR, or the per-job default under $TMPDIR (or /tmp).
std::string directory();

// Opens `dir` for writing dumps (made with mode 0700 where missing) and returns its
// descriptor, or -1 with `why` set ("it belongs to uid 65534, not to this process's uid 0").
// With `must_be_private` (the default directory, in a temp directory every user can write) it
// must be a directory, not a symlink, owned by this process's uid and writable by no one else:
// otherwise another user could replace or remove the dumps. CHORUS_TRACE_DIR is the user's
// own choice and is used as it is.
int open_dump_directory(const std::string& dir, bool must_be_private, std::string& why);
// The one WARN line dump_all() logs when it refuses the default directory: what, why, and
// what to do (CHORUS_TRACE_DIR, or remove the directory).
std::string refused_default_message(const std::string& dir, const std::string& why);

// Makes a group's recorder visible to dumps (held weakly: a destroyed group drops out). The
// first call installs the SIGUSR1 handler, unless the program has its own.
void register_recorder(const std::shared_ptr<FlightRecorder>& recorder);

// Writes this process's dump now. Returns the file's path, or "" if recording is off or the
// write failed (logged as a WARN; never throws: it runs on failure paths).
std::string dump_all(const std::string& reason) noexcept;

// The dump document for these snapshots (exposed for tests and chorus-trace's own tests).
std::string to_json(const std::vector<TraceSnapshot>& groups, const std::string& reason);

}  // namespace chorus::trace
