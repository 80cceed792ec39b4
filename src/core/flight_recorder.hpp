// SPDX-License-Identifier: BSD-3-Clause
// FlightRecorder: the last ops of one process group, kept in a fixed ring so it can stay on in
// production. When a job hangs or fails, each rank's record of what it issued, started and
// finished (dumped by trace_dump.hpp, read by chorus-trace) tells which rank fell behind, which
// op mismatched and where the first failure was, which one error message per rank cannot.
//
// Cost per op: an uncontended spin lock per event, a few stores into a preallocated slot, and no
// allocation (op/algorithm names are static strings; an error message is copied only when an op
// fails). An op run inline on the issuing thread costs one locked update: its issue and start
// together (issued_as()), and its end published with one store (ended_latest()) that the next
// locked update folds into its entry. Stamps are steady time from tsc_now() (core/tsc_clock.hpp:
// the TSC where that is as good), the issue stamp the one the caller read already for the op's
// deadline, turned into Unix time with the offset between the two clocks taken when the recorder
// was made, so that ranks' dumps line up; a step of the system clock later (not a slew) shifts this
// rank's stamps by that step. A clock_gettime() costs about as much as the rest of an 8-byte op's
// recording on a VM, hence the TSC. An end or start stamp is never before the op's earlier ones
// (tsc_now() may step back by a few microseconds when it re-anchors).
#pragma once

#include "core/private.hpp"

#include <atomic>
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
  // The number issued() will give the next op (0 when recording is off), for an op whose entry
  // is made later by issued_as(), issue and start in one update. issued(), next_record(),
  // issued_as() and ended_latest() are called by one thread at a time (the group's issue
  // lock), with no other issue between next_record() and issued_as().
  std::uint64_t next_record() const noexcept { return ring_.empty() ? 0 : recorded_ + 1; }
  // Records op `record` (next_record()) issued at `now`, started then with `algorithm` if not
  // null. A record that is not next_record() is ignored.
  void issued_as(std::uint64_t record, const TraceEntry& entry, Clock::time_point now,
                 const char* algorithm) noexcept;
  // Marks op `record` started with `algorithm`; on an op already started, only renames its
  // algorithm (an op that chose it in a first phase, e.g. by agreeing on memory kinds).
  void started(std::uint64_t record, const char* algorithm) noexcept;
  void ended(std::uint64_t record, const std::exception_ptr& error) noexcept;
  // The successful end at `end` of the latest op, issued at `issued`, from its issuing
  // thread: one store, no lock (the next issue or snapshot applies it). Any other record goes
  // through ended(), ended now.
  void ended_latest(std::uint64_t record, Clock::time_point issued, Clock::time_point end) noexcept;
  // The group's first failure (kept once).
  void group_failed(const std::exception_ptr& error) noexcept;

  TraceSnapshot snapshot() const;
  bool enabled() const noexcept { return !ring_.empty(); }
  const TraceGroup& group() const noexcept { return group_; }

 private:
  TraceEntry* slot(std::uint64_t record) noexcept;  // null if overwritten or 0
  // Fills the next slot; under mu_.
  std::uint64_t record_issue(const TraceEntry& entry, std::int64_t issued_us) noexcept;
  // Applies latest_end_ to the latest entry if it is new; under mu_ (a snapshot applies it to
  // its copy).
  void fold_latest_end() noexcept;
  // Microseconds since the Unix epoch at steady time `t`.
  std::int64_t stamp_us(Clock::time_point t) const noexcept;

  const TraceGroup group_;
  const std::int64_t steady_to_unix_us_;  // Unix time minus steady time, when made
  mutable SpinLock mu_;  // held for a few stores per event (a snapshot: a copy of the ring)
  std::vector<TraceEntry> ring_;  // guarded by mu_
  // Written under mu_ by issuers only, which the group's issue lock orders: they may read it
  // without mu_.
  std::uint64_t recorded_ = 0;
  std::size_t latest_ = 0;  // ring_ index of record recorded_; guarded by mu_
  // ended_latest()'s end: the record's low 32 bits, then bit 31 set (never 0) and the
  // microseconds from its issue stamp to its end in bits 0-30.
  std::atomic<std::uint64_t> latest_end_{0};
  std::uint64_t folded_end_ = 0;    // the latest_end_ value applied last; guarded by mu_
  std::string failure_;             // guarded by mu_
  std::int64_t failure_us_ = 0;     // guarded by mu_
  std::vector<int> failure_peers_;  // guarded by mu_
};

// The first line of an exception's message ("unknown error" if it is not a std::exception).
std::string first_line(const std::exception_ptr& error);

}  // namespace chorus
