// SPDX-License-Identifier: BSD-3-Clause
// FlightRecorder: the last ops of one process group, kept in a fixed ring so it can stay on in
// production. When a job hangs or fails, each rank's record of what it issued, started and
// finished (dumped by trace_dump.hpp, read by chorus-trace) tells which rank fell behind, which
// op mismatched and where the first failure was, which one error message per rank cannot.
//
// Cost per op: an uncontended spin lock per event (an op run inline on the issuing thread has
// two: issued, and started-and-ended), a few stores into a preallocated slot, and no
// allocation (op/algorithm names are static strings; an error message is copied only when an op
// fails). Stamps are steady time from tsc_now() (core/tsc_clock.hpp: the TSC where that is as
// good), the issue stamp the one the caller read already for the op's deadline, turned into Unix
// time with the offset between the two clocks taken when the recorder was made, so that ranks'
// dumps line up; a step of the system clock later (not a slew) shifts this rank's stamps by that
// step. A clock_gettime() costs about as much as the rest of an 8-byte op's recording on a VM,
// hence the TSC. An end or start stamp is never before the op's earlier ones (tsc_now() may step
// back by a few microseconds when it re-anchors).
#pragma once

#include "core/private.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/types.hpp>

#include "core/spin_lock.hpp"

namespace chorus {

enum class TraceState : std::uint8_t { issued, started, completed, failed };
const char* to_string(TraceState state) noexcept;

// Microseconds since the Unix epoch (the system clock, so that ranks' dumps line up).
std::int64_t trace_now_us() noexcept;

struct TraceEntry {
  std::uint64_t record = 0;  // 1-based position in this recorder's history (0: empty slot)
  std::uint64_t seq = 0;     // the op's sequence number (collective or p2p numbering)
  bool p2p = false;
  const char* op = "";
  DataType dtype = DataType::uint8;
  std::uint64_t count = 0;
  int root = -1;  // rooted collectives
  int peer = -1;  // send/recv
  std::uint32_t tag = 0;
  const char* algorithm = "";  // set by the backend when the op starts, "" if it never did
  std::uint64_t bytes = 0;     // payload bytes of this rank
  std::int64_t issued_us = 0;
  std::int64_t started_us = 0;  // 0: not started
  std::int64_t ended_us = 0;    // 0: not ended
  TraceState state = TraceState::issued;
  std::string error;  // first line of the error, when failed
};

struct TraceGroup {
  std::string name;
  std::string backend;
  int rank = 0;
  int size = 1;
};

struct TraceSnapshot {
  TraceGroup group;
  std::size_t capacity = 0;
  std::uint64_t recorded = 0;       // ops recorded since the group was made (>= entries.size())
  std::vector<TraceEntry> entries;  // oldest first
  std::string failure;              // the group's first failure ("" if healthy)
  std::int64_t failure_us = 0;
  std::vector<int> failure_peers;  // the ranks that failure names (chorus::Error's context)
};

class FlightRecorder {
 public:
  // capacity 0 disables recording (every call is then a no-op returning record 0).
  FlightRecorder(TraceGroup group, std::size_t capacity);

  // Records an op issued at `now`; returns its record number for the calls below.
  std::uint64_t issued(const TraceEntry& entry, Clock::time_point now = Clock::now()) noexcept;
  void started(std::uint64_t record, const char* algorithm) noexcept;
  // An op that started on the issuing thread as it was issued: started at its issue time.
  void started_at_issue(std::uint64_t record, const char* algorithm) noexcept;
  // `started_at_issue`, if not null, is the algorithm of an op that started at its issue time
  // and was not recorded as started (started_at_issue() and ended() in one update).
  void ended(std::uint64_t record, const std::exception_ptr& error,
             const char* started_at_issue = nullptr) noexcept;
  // The group's first failure (kept once).
  void group_failed(const std::exception_ptr& error) noexcept;

  TraceSnapshot snapshot() const;
  bool enabled() const noexcept { return !ring_.empty(); }
  const TraceGroup& group() const noexcept { return group_; }

 private:
  TraceEntry* slot(std::uint64_t record) noexcept;  // null if overwritten or 0
  // Microseconds since the Unix epoch at steady time `t`.
  std::int64_t stamp_us(Clock::time_point t) const noexcept;

  const TraceGroup group_;
  const std::int64_t steady_to_unix_us_;  // Unix time minus steady time, when made
  mutable SpinLock mu_;  // held for a few stores per event (a snapshot: a copy of the ring)
  std::vector<TraceEntry> ring_;    // guarded by mu_
  std::uint64_t recorded_ = 0;      // guarded by mu_
  std::size_t latest_ = 0;          // ring_ index of record recorded_; guarded by mu_
  std::string failure_;             // guarded by mu_
  std::int64_t failure_us_ = 0;     // guarded by mu_
  std::vector<int> failure_peers_;  // guarded by mu_
};

// The first line of an exception's message ("unknown error" if it is not a std::exception).
std::string first_line(const std::exception_ptr& error);

}  // namespace chorus
