// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup's public methods: argument checks shared by every backend (InvalidArgument on
// the calling rank, before anything is sent), fast failure after an abort, sequence numbers
// and deadlines; then the backend's do_<op>().
#include <chorus/process_group.hpp>

#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/flight_recorder.hpp"
#include "core/format.hpp"
#include "core/trace_dump.hpp"
#include "core/tsc_clock.hpp"
#include "core/work_state.hpp"

namespace chorus {
namespace {

std::string describe(const Tensor& t) {
  return fmt::format("{} x {}", t.count(), to_string(t.dtype()));
}

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

ProcessGroup::ProcessGroup(int rank, int size, const GroupOptions& options)
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

ProcessGroup::~ProcessGroup() = default;

std::exception_ptr ProcessGroup::failure() const {
  return failed_.load(std::memory_order_acquire) ? failure_ : nullptr;
}

bool ProcessGroup::record_failure(std::exception_ptr error) noexcept {
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

void ProcessGroup::rethrow_if_failed() const {
  if (failed_.load(std::memory_order_acquire)) {
    std::rethrow_exception(failure_);
  }
}

void ProcessGroup::check_device(const Tensor& t, const char* what, const char* op_name) const {
  if (t.count() == 0) {
    return;
  }
  if (t.device() != device()) {
    throw InvalidArgument(fmt::format(
        "{} on rank {}/{} [{}]: {} is on {}:{} but the {} backend needs tensors on {}:{}; move it "
        "there first",
        op_name, rank_, size_, name_, what, to_string(t.device().type), t.device().index,
        backend_name(), to_string(device().type), device().index));
  }
  if (t.data() == nullptr) {
    throw InvalidArgument(
        fmt::format("{} on rank {}/{} [{}]: {} has {} elements but a null data pointer", op_name,
                    rank_, size_, name_, what, t.count()));
  }
}

// Called with issue_mu_ held; the caller keeps it until do_<op>() has queued the op.
OpCall ProcessGroup::begin(const char* name, const std::optional<Duration>& timeout,
                           bool collective, TraceEntry& trace, bool late) {
  rethrow_if_failed();
  OpCall call;
  call.name = name;
  call.timeout = timeout ? *timeout : timeout_;
  if (call.timeout <= Duration::zero()) {
    throw InvalidArgument(fmt::format("{} on rank {}/{} [{}]: timeout must be positive, got {} ms",
                                      name, rank_, size_, name_, call.timeout.count()));
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

FlightRecorder& ProcessGroup::recorder() {
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

std::shared_ptr<Work> ProcessGroup::traced(const OpCall& call, std::shared_ptr<Work> work) {
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

void ProcessGroup::trace_started(const OpCall& call, const char* algorithm) noexcept {
  if (call.trace_record != 0) {
    recorder_->started(call.trace_record, algorithm);
  }
}

void ProcessGroup::trace_issued(const OpCall& call, const char* algorithm) noexcept {
  if (const TraceEntry* entry = std::exchange(unrecorded_, nullptr)) {
    recorder_->issued_as(call.trace_record, *entry, call.issued, algorithm);
  }
}

#define CHORUS_ARG_CHECK(cond, ...)                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      throw InvalidArgument(fmt::format("{} on rank {}/{} [{}]: {}", call.name, rank_, size_, \
                                        name_, fmt::format(__VA_ARGS__)));                    \
    }                                                                                         \
  } while (0)

namespace {
// Argument checks run before a sequence number is taken, so that a rejected call leaves the
// group's numbering unchanged on the calling rank.
struct PreCall {
  const char* name;
};
}  // namespace

std::shared_ptr<Work> ProcessGroup::allreduce(Tensor in, Tensor out,
                                              const AllreduceOptions& options) {
  const PreCall call{"allreduce"};
  CHORUS_ARG_CHECK(in.count() == out.count() && in.dtype() == out.dtype(),
                   "output ({}) must match input ({}) in count and dtype", describe(out),
                   describe(in));
  CHORUS_ARG_CHECK(
      in.same_view(out) || !in.overlaps(out),
      "out-of-place input and output overlap; pass the same tensor twice for in-place");
  check_device(in, "input", call.name);
  check_device(out, "output", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(in);
  const bool late = late_record_bytes_ != 0 && in.nbytes() <= late_record_bytes_;
  OpCall op = begin(call.name, options.timeout, true, trace, late);
  return traced(op, do_allreduce(in, out, options.op, op));
}

std::shared_ptr<Work> ProcessGroup::allgather(Tensor in, Tensor out,
                                              const CollectiveOptions& options) {
  const PreCall call{"allgather"};
  CHORUS_ARG_CHECK(
      in.dtype() == out.dtype() && out.count() == in.count() * static_cast<std::size_t>(size_),
      "output ({}) must hold size {} x input ({})", describe(out), size_, describe(in));
  const bool in_place =
      in.count() > 0 &&
      in.same_view(out.slice(static_cast<std::size_t>(rank_) * in.count(), in.count()));
  CHORUS_ARG_CHECK(in_place || !in.overlaps(out),
                   "input overlaps output; for in-place pass output.slice(rank * n, n) as input");
  check_device(in, "input", call.name);
  check_device(out, "output", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(in);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_allgather(in, out, op));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor in, Tensor out,
                                                   const ReduceScatterOptions& options) {
  const PreCall call{"reduce_scatter"};
  CHORUS_ARG_CHECK(
      in.dtype() == out.dtype() && in.count() == out.count() * static_cast<std::size_t>(size_),
      "input ({}) must hold size {} x output ({})", describe(in), size_, describe(out));
  const bool in_place =
      out.count() > 0 &&
      out.same_view(in.slice(static_cast<std::size_t>(rank_) * out.count(), out.count()));
  CHORUS_ARG_CHECK(in_place || !in.overlaps(out),
                   "output overlaps input; for in-place pass input.slice(rank * n, n) as output");
  check_device(in, "input", call.name);
  check_device(out, "output", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(out);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_reduce_scatter(in, out, options.op, op));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor inout, const RootOptions& options) {
  const PreCall call{"broadcast"};
  CHORUS_ARG_CHECK(options.root >= 0 && options.root < size_, "root {} is not a rank in [0, {})",
                   options.root, size_);
  check_device(inout, "tensor", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(inout, options.root);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_broadcast(inout, options.root, op));
}

std::shared_ptr<Work> ProcessGroup::reduce(Tensor in, Tensor out, const ReduceOptions& options) {
  const PreCall call{"reduce"};
  CHORUS_ARG_CHECK(options.root >= 0 && options.root < size_, "root {} is not a rank in [0, {})",
                   options.root, size_);
  if (rank_ == options.root) {
    CHORUS_ARG_CHECK(in.count() == out.count() && in.dtype() == out.dtype(),
                     "output ({}) on the root must match input ({})", describe(out), describe(in));
    CHORUS_ARG_CHECK(
        in.same_view(out) || !in.overlaps(out),
        "out-of-place input and output overlap; pass the same tensor twice for in-place");
  }
  check_device(in, "input", call.name);
  if (rank_ == options.root) {
    check_device(out, "output", call.name);
  }
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(in, options.root);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_reduce(in, out, options.op, options.root, op));
}

std::shared_ptr<Work> ProcessGroup::gather(Tensor in, Tensor out, const RootOptions& options) {
  const PreCall call{"gather"};
  CHORUS_ARG_CHECK(options.root >= 0 && options.root < size_, "root {} is not a rank in [0, {})",
                   options.root, size_);
  if (rank_ == options.root) {
    CHORUS_ARG_CHECK(
        in.dtype() == out.dtype() && out.count() == in.count() * static_cast<std::size_t>(size_),
        "output ({}) on the root must hold size {} x input ({})", describe(out), size_,
        describe(in));
    const bool in_place =
        in.count() > 0 &&
        in.same_view(out.slice(static_cast<std::size_t>(rank_) * in.count(), in.count()));
    CHORUS_ARG_CHECK(in_place || !in.overlaps(out), "input overlaps output on the root");
  }
  check_device(in, "input", call.name);
  if (rank_ == options.root) {
    check_device(out, "output", call.name);
  }
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(in, options.root);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_gather(in, out, options.root, op));
}

std::shared_ptr<Work> ProcessGroup::scatter(Tensor in, Tensor out, const RootOptions& options) {
  const PreCall call{"scatter"};
  CHORUS_ARG_CHECK(options.root >= 0 && options.root < size_, "root {} is not a rank in [0, {})",
                   options.root, size_);
  if (rank_ == options.root) {
    CHORUS_ARG_CHECK(
        in.dtype() == out.dtype() && in.count() == out.count() * static_cast<std::size_t>(size_),
        "input ({}) on the root must hold size {} x output ({})", describe(in), size_,
        describe(out));
    const bool in_place =
        out.count() > 0 &&
        out.same_view(in.slice(static_cast<std::size_t>(rank_) * out.count(), out.count()));
    CHORUS_ARG_CHECK(in_place || !in.overlaps(out), "output overlaps input on the root");
  }
  if (rank_ == options.root) {
    check_device(in, "input", call.name);
  }
  check_device(out, "output", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(out, options.root);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_scatter(in, out, options.root, op));
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor in, Tensor out,
                                               const CollectiveOptions& options) {
  const PreCall call{"all_to_all"};
  CHORUS_ARG_CHECK(in.count() == out.count() && in.dtype() == out.dtype(),
                   "output ({}) must match input ({})", describe(out), describe(in));
  CHORUS_ARG_CHECK(in.count() % static_cast<std::size_t>(size_) == 0,
                   "count {} is not divisible by the group size {}", in.count(), size_);
  CHORUS_ARG_CHECK(
      in.same_view(out) || !in.overlaps(out),
      "out-of-place input and output overlap; pass the same tensor twice for in-place");
  check_device(in, "input", call.name);
  check_device(out, "output", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(in);
  OpCall op = begin(call.name, options.timeout, true, trace);
  return traced(op, do_all_to_all(in, out, op));
}

std::shared_ptr<Work> ProcessGroup::barrier(const CollectiveOptions& options) {
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(Tensor());
  OpCall op = begin("barrier", options.timeout, true, trace);
  return traced(op, do_barrier(op));
}

std::shared_ptr<Work> ProcessGroup::send(Tensor tensor, int dst, std::uint32_t tag,
                                         const CollectiveOptions& options) {
  const PreCall call{"send"};
  CHORUS_ARG_CHECK(dst >= 0 && dst < size_ && dst != rank_,
                   "destination {} is not another rank in [0, {})", dst, size_);
  check_device(tensor, "tensor", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(tensor, -1, dst, tag);
  OpCall op = begin(call.name, options.timeout, false, trace);
  return traced(op, do_send(tensor, dst, tag, op));
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor tensor, int src, std::uint32_t tag,
                                         const CollectiveOptions& options) {
  const PreCall call{"recv"};
  CHORUS_ARG_CHECK(src == kAnySource || (src >= 0 && src < size_ && src != rank_),
                   "source {} is not another rank in [0, {}) nor kAnySource", src, size_);
  check_device(tensor, "tensor", call.name);
  const std::lock_guard issue(issue_mu_);
  TraceEntry trace = op_trace(tensor, -1, src, tag);
  OpCall op = begin(call.name, options.timeout, false, trace);
  return traced(op, do_recv(tensor, src, tag, op));
}

}  // namespace chorus
