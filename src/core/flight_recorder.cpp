// SPDX-License-Identifier: BSD-3-Clause
#include "core/flight_recorder.hpp"

#include <algorithm>
#include <chrono>

#include <chorus/errors.hpp>

#include "core/tsc_clock.hpp"

namespace chorus {

const char* to_string(TraceState state) noexcept {
  switch (state) {
    case TraceState::issued:
      return "issued";
    case TraceState::started:
      return "started";
    case TraceState::completed:
      return "completed";
    case TraceState::failed:
      return "failed";
  }
  return "unknown";
}

std::int64_t trace_now_us() noexcept {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

std::string first_line(const std::exception_ptr& error) {
  if (!error) {
    return {};
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::string text = e.what();
    if (const auto eol = text.find('\n'); eol != std::string::npos) {
      text.resize(eol);
    }
    return text;
  } catch (...) {
    return "unknown error";
  }
}

namespace {
std::int64_t since_epoch_us(Clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}
}  // namespace

FlightRecorder::FlightRecorder(TraceGroup group, std::size_t capacity)
    : group_(std::move(group)),
      steady_to_unix_us_(trace_now_us() - since_epoch_us(Clock::now())),
      ring_(capacity) {}

std::int64_t FlightRecorder::stamp_us(Clock::time_point t) const noexcept {
  return since_epoch_us(t) + steady_to_unix_us_;
}

TraceEntry* FlightRecorder::slot(std::uint64_t record) noexcept {
  if (record == 0 || ring_.empty()) {
    return nullptr;
  }
  // The latest record (an op run inline ends before the next is issued) needs no division: a
  // 64-bit one costs about as much as the rest of recording an op.
  TraceEntry& e = ring_[record == recorded_ ? latest_ : (record - 1) % ring_.size()];
  return e.record == record ? &e : nullptr;
}

std::uint64_t FlightRecorder::issued(const TraceEntry& entry, Clock::time_point at) noexcept {
  if (ring_.empty()) {
    return 0;
  }
  const std::int64_t now = stamp_us(at);
  const std::lock_guard lock(mu_);
  return record_issue(entry, now);
}

void FlightRecorder::issued_as(std::uint64_t record, const TraceEntry& entry, Clock::time_point at,
                               const char* algorithm) noexcept {
  if (record == 0 || record != next_record()) {
    return;
  }
  const std::int64_t now = stamp_us(at);
  const std::lock_guard lock(mu_);
  record_issue(entry, now);
  if (algorithm != nullptr) {
    TraceEntry& e = ring_[latest_];
    e.started_us = now;
    e.algorithm = algorithm;
    e.state = TraceState::started;
  }
}

std::uint64_t FlightRecorder::record_issue(const TraceEntry& entry, std::int64_t now) noexcept {
  fold_latest_end();  // before the latest entry changes
  const std::uint64_t record = ++recorded_;
  latest_ = record == 1 || latest_ + 1 == ring_.size() ? 0 : latest_ + 1;
  TraceEntry& e = ring_[latest_];
  e.record = record;
  e.seq = entry.seq;
  e.p2p = entry.p2p;
  e.op = entry.op;
  e.dtype = entry.dtype;
  e.count = entry.count;
  e.root = entry.root;
  e.peer = entry.peer;
  e.tag = entry.tag;
  e.algorithm = "";
  e.bytes = entry.bytes;
  e.issued_us = now;
  e.started_us = 0;
  e.ended_us = 0;
  e.state = TraceState::issued;
  e.error.clear();  // keeps its capacity: no allocation on the healthy path
  return record;
}

namespace {
constexpr std::uint64_t kRecordBits = 0xffffffff;
constexpr std::uint64_t kEndSet = std::uint64_t{1} << 31;
constexpr std::int64_t kMaxEndOffsetUs = (std::int64_t{1} << 31) - 1;  // 35 minutes
}  // namespace

void FlightRecorder::ended_latest(std::uint64_t record, Clock::time_point issued,
                                  Clock::time_point end) noexcept {
  // recorded_ is written only by issuers, which the group's issue lock orders with this call.
  if (record == 0 || record != recorded_) {
    ended(record, nullptr);
    return;
  }
  // The offset in the units of the stamps: the end's microseconds less the issue's.
  const std::int64_t offset =
      std::clamp<std::int64_t>(since_epoch_us(end) - since_epoch_us(issued), 0,
                               kMaxEndOffsetUs);  // tsc_now() may step back a little
  latest_end_.store(((record & kRecordBits) << 32) | kEndSet | static_cast<std::uint64_t>(offset),
                    std::memory_order_release);
}

namespace {
// Completes `e` with ended_latest()'s `end` if that is e's end and e has not ended otherwise.
void complete_with(TraceEntry& e, std::uint64_t end) noexcept {
  if ((end & kEndSet) == 0 || (e.record & kRecordBits) != end >> 32 || e.ended_us != 0) {
    return;
  }
  const auto offset = static_cast<std::int64_t>(end & (kEndSet - 1));
  e.ended_us = std::max(e.issued_us + offset, e.started_us);
  e.state = TraceState::completed;
}
}  // namespace

void FlightRecorder::fold_latest_end() noexcept {
  const std::uint64_t end = latest_end_.load(std::memory_order_acquire);
  if (end != folded_end_ && recorded_ != 0) {
    folded_end_ = end;
    complete_with(ring_[latest_], end);
  }
}

void FlightRecorder::started(std::uint64_t record, const char* algorithm) noexcept {
  if (record == 0) {
    return;
  }
  const std::int64_t now = stamp_us(tsc_now());
  const std::lock_guard lock(mu_);
  TraceEntry* e = slot(record);
  if (e == nullptr) {
    return;
  }
  if (e->state == TraceState::issued) {
    e->started_us = std::max(now, e->issued_us);  // tsc_now() may step back a little
    e->algorithm = algorithm != nullptr ? algorithm : "";
    e->state = TraceState::started;
  } else if (e->state == TraceState::started && algorithm != nullptr) {
    e->algorithm = algorithm;  // an op's second phase, with the algorithm its first one chose
  }
}

void FlightRecorder::ended(std::uint64_t record, const std::exception_ptr& error) noexcept {
  if (record == 0) {
    return;
  }
  std::string message;
  if (error) {
    try {
      message = first_line(error);
    } catch (...) {
      message = "error (message unavailable: out of memory)";
    }
  }
  const std::int64_t now = stamp_us(tsc_now());
  const std::lock_guard lock(mu_);
  if (TraceEntry* e = slot(record); e != nullptr) {
    e->ended_us = std::max(now, std::max(e->started_us, e->issued_us));
    e->state = error ? TraceState::failed : TraceState::completed;
    if (error) {
      e->error.swap(message);  // else left empty by issued()
    }
  }
}

void FlightRecorder::group_failed(const std::exception_ptr& error) noexcept {
  std::string message;
  std::vector<int> peers;
  try {
    message = first_line(error);
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      peers = e.context().peers;
    } catch (...) {
    }
  } catch (...) {
    message = "error (message unavailable: out of memory)";
  }
  const std::int64_t now = stamp_us(Clock::now());
  const std::lock_guard lock(mu_);
  if (failure_us_ == 0) {
    failure_.swap(message);
    failure_peers_.swap(peers);
    failure_us_ = now;
  }
}

TraceSnapshot FlightRecorder::snapshot() const {
  TraceSnapshot s;
  s.group = group_;
  s.capacity = ring_.size();
  const std::lock_guard lock(mu_);
  s.recorded = recorded_;
  s.failure = failure_;
  s.failure_us = failure_us_;
  s.failure_peers = failure_peers_;
  const std::uint64_t kept = std::min<std::uint64_t>(recorded_, ring_.size());
  s.entries.reserve(kept);
  for (std::uint64_t r = recorded_ - kept + 1; r <= recorded_; ++r) {
    s.entries.push_back(ring_[(r - 1) % ring_.size()]);
  }
  if (!s.entries.empty()) {  // the latest op's end, if published since the last fold
    complete_with(s.entries.back(), latest_end_.load(std::memory_order_acquire));
  }
  return s;
}

}  // namespace chorus
