// SPDX-License-Identifier: BSD-3-Clause
// Backend's one entry: the op's shape rules (InvalidArgument on the calling rank, before
// anything is sent), fast failure after an abort, sequence numbers, deadlines and the flight
// recorder; then the backend's start().
#include "core/backend.hpp"

#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/error_copy.hpp"
#include "core/flight_recorder.hpp"
#include "core/format.hpp"
#include "core/op_rules.hpp"
#include "core/trace_dump.hpp"
#include "core/tsc_clock.hpp"
#include "core/work_state.hpp"

namespace chorus::detail {
namespace {

// What the flight recorder notes about an op's arguments; begin() adds seq and name.
TraceEntry op_trace(const Tensor& t, int root = -1, int peer = -1, std::uint32_t tag = 0) {
  TraceEntry e;
  e.dtype = t.dtype();
  e.count = t.count();
  e.bytes = t.nbytes();
  e.root = root;
  e.peer = peer;
  e.tag = tag;
  return e;
}

// A coalesced op's tensors (all of one dtype, checked) in its trace entry.
void add_parts(TraceEntry& e, const std::vector<Tensor>& parts) {
  e.dtype = parts[0].dtype();
  for (const Tensor& t : parts) {
    e.count += t.count();
    e.bytes += t.nbytes();
  }
}

const char* dump_reason(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    switch (e.code()) {
      case ErrorCode::timeout:
        return "timeout";
      case ErrorCode::network:
        return "peer failure";
      case ErrorCode::aborted:
        return "abort";
      case ErrorCode::invalid_argument:
        return "mismatch";
      default:
        return "failure";
    }
  } catch (...) {
    return "failure";
  }
}

}  // namespace

Backend::Backend(int rank, int size, const GroupOptions& options)
    : rank_(rank),
      size_(size),
      name_(options.name),
      timeout_(options.timeout ? *options.timeout : env::resolve_default_timeout()),
      trace_capacity_(trace::buffer_entries()) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument(fmt::format(
        "process group '{}': rank {} is not in [0, {}) or size {} < 1; check RANK and WORLD_SIZE",
        name_, rank, size, size));
  }
  if (timeout_ <= Duration::zero()) {
    throw InvalidArgument(fmt::format("process group '{}': timeout must be positive, got {} ms",
                                      name_, timeout_.count()));
  }
}

Backend::~Backend() = default;

std::unique_ptr<Backend> Backend::shrink(ShrinkOptions) {
  throw InvalidArgument(fmt::format("shrink {}: the {} backend cannot shrink a group (the tcp "
                                    "backend can); recreate the group on the survivors instead",
                                    format_on_rank(rank_, size_, name_), backend_name()),
                        ErrorContext{.rank = rank_, .size = size_, .group = name_, .op = "shrink"});
}

std::unique_ptr<Backend> Backend::grow(GrowOptions) {
  throw InvalidArgument(fmt::format("grow {}: the {} backend cannot grow a group (the tcp backend "
                                    "can)",
                                    format_on_rank(rank_, size_, name_), backend_name()),
                        ErrorContext{.rank = rank_, .size = size_, .group = name_, .op = "grow"});
}

void Backend::stop_admitting(const std::string&) {}

std::unique_ptr<Backend> Backend::form_grown(std::int64_t, int, int, GroupOptions, Formation) {
  throw InvalidArgument(fmt::format("grow {}: the {} backend cannot form a group",
                                    format_on_rank(rank_, size_, name_), backend_name()));
}

void Backend::set_lobby(std::shared_ptr<Store> lobby, std::string lobby_name) {
  lobby_ = std::move(lobby);
  lobby_name_ = std::move(lobby_name);
}

std::exception_ptr Backend::failure() const {
  // A copy per caller: the failure is read and rethrown on every thread that uses the group.
  return failed_.load(std::memory_order_acquire) ? private_copy(failure_) : nullptr;
}

bool Backend::record_failure(std::exception_ptr error) noexcept {
  if (failure_claimed_.exchange(true, std::memory_order_acq_rel)) {
    return false;
  }
  failure_ = std::move(error);
  failed_.store(true, std::memory_order_release);
  if (trace_capacity_ != 0) {
    try {
      recorder().group_failed(failure_);
    } catch (...) {
      return true;  // out of memory making the recorder: nothing to dump
    }
    trace::dump_all(dump_reason(failure_));
  }
  return true;
}

void Backend::rethrow_if_failed() const {
  if (failed_.load(std::memory_order_acquire)) {
    rethrow_private_copy(failure_);  // each caller owns what it catches (core/error_copy.hpp)
  }
}

void Backend::check_device(const Tensor& t, const char* what, const char* op_name) const {
  if (t.count() == 0) {
    return;
  }
  if (t.device() != device()) {
    throw InvalidArgument(
        fmt::format("{} {}: {} is on {}:{} but the {} backend needs tensors on {}:{}; move it "
                    "there first",
                    op_name, format_on_rank(rank_, size_, name_), what, to_string(t.device().type),
                    t.device().index, backend_name(), to_string(device().type), device().index));
  }
  if (t.data() == nullptr) {
    throw InvalidArgument(fmt::format("{} {}: {} has {} elements but a null data pointer", op_name,
                                      format_on_rank(rank_, size_, name_), what, t.count()));
  }
}

void Backend::check_supported(const OpDescriptor&, const char*) const {}

// Called with issue_mu_ held; issue() keeps it until the backend's start() has queued the op.
OpCall Backend::begin(const char* name, const std::optional<Duration>& timeout, bool collective,
                      TraceEntry& trace, bool late) {
  rethrow_if_failed();
  OpCall call;
  call.name = name;
  call.timeout = timeout ? *timeout : timeout_;
  if (call.timeout <= Duration::zero()) {
    throw InvalidArgument(fmt::format("{} {}: timeout must be positive, got {} ms", name,
                                      format_on_rank(rank_, size_, name_), call.timeout.count()));
  }
  // One clock read for the deadline, the flight recorder and the backend (OpCall::issued), from
  // the TSC where that is as good (tsc_clock.hpp).
  call.issued = tsc_now();
  call.deadline = Deadline::after(call.timeout, call.issued);
  call.seq = collective ? next_seq_++ : next_p2p_seq_++;
  trace.seq = call.seq;
  trace.p2p = !collective;
  trace.op = name;
  if (late) {
    call.trace_record = recorder().next_record();
    unrecorded_ = &trace;
  } else {
    unrecorded_ = nullptr;
    call.trace_record = recorder().issued(trace, call.issued);
  }
  return call;
}

FlightRecorder& Backend::recorder() {
  // Every op asks: once made, no call_once (it costs more than the rest of an 8-byte op's
  // recording, thread-local bookkeeping included).
  if (FlightRecorder* made = recorder_made_.load(std::memory_order_acquire)) {
    return *made;
  }
  std::call_once(recorder_once_, [this] {
    recorder_ = std::make_shared<FlightRecorder>(
        TraceGroup{.name = name_, .backend = backend_name(), .rank = rank_, .size = size_},
        trace_capacity_);
    trace::register_recorder(recorder_);
    recorder_made_.store(recorder_.get(), std::memory_order_release);
  });
  return *recorder_;
}

std::shared_ptr<Work> Backend::traced(const OpCall& call, std::shared_ptr<Work> work) {
  // If the backend left the op unrecorded; either way the pointer to the caller's entry goes.
  trace_issued(call, nullptr);
  if (call.trace_record == 0 || !work) {
    return work;
  }
  // A Work complete already (the backend ran the op on this thread): its end now. Backends
  // built on WorkState note the end before waiters wake (a dump taken after wait() shows the op
  // ended); others through a callback.
  if (work->is_completed()) {
    if (!work->is_success()) {
      recorder_->ended(call.trace_record, work->exception());
    } else {  // one store, no lock
      recorder_->ended_latest(call.trace_record, call.issued, tsc_now());
    }
    return work;
  }
  if (auto* state = dynamic_cast<WorkState*>(work.get())) {
    state->trace_end_in(recorder_, call.trace_record);
  } else {
    work->then([recorder = recorder_, record = call.trace_record](Work& w) {
      recorder->ended(record, w.exception());
    });
  }
  return work;
}

void Backend::trace_started(const OpCall& call, const char* algorithm) noexcept {
  if (call.trace_record != 0) {
    recorder_->started(call.trace_record, algorithm);
  }
}

void Backend::trace_issued(const OpCall& call, const char* algorithm) noexcept {
  if (const TraceEntry* entry = std::exchange(unrecorded_, nullptr)) {
    recorder_->issued_as(call.trace_record, *entry, call.issued, algorithm);
  }
}

std::shared_ptr<Work> Backend::issue(const OpDescriptor& op) {
  // Checked before a sequence number is taken, so that a rejected call leaves the group's
  // numbering unchanged on the calling rank.
  const OpRule& rule = op_rule(op.type);
  rule.check(op, *this, rule.name);
  check_supported(op, rule.name);
  const bool p2p = !rule.collective;
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(rule.traces_output ? op.out : op.in, rule.rooted ? op.root : -1,
                              p2p ? op.peer : -1, p2p ? op.tag : 0);
  if (!op.ins.empty()) {  // coalesced: the recorder shows the sum over the tensors
    add_parts(trace, rule.traces_output ? op.outs : op.ins);
  }
  const bool late = op.type == OpType::allreduce && late_record_bytes_ != 0 && op.ins.empty() &&
                    op.in.nbytes() <= late_record_bytes_;
  const OpCall call = begin(rule.name, op.timeout, rule.collective, trace, late);
  return traced(call, start(op, call));
}

}  // namespace chorus::detail
