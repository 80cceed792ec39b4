// SPDX-License-Identifier: BSD-3-Clause
// Backend: what a ProcessGroup handle runs on. The base holds what every backend shares (rank,
// size, failure state, sequence numbers, the flight recorder) and the one entry, issue(),
// which checks an OpDescriptor against its op's shape rules (op_rules.hpp), numbers it and
// hands it to the backend's start(). A backend implements start() for the op types it runs.
#pragma once

#include "core/private.hpp"

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/options.hpp>
#include <chorus/process_group.hpp>
#include <chorus/work.hpp>

#include "core/op_call.hpp"

namespace chorus {

class FlightRecorder;  // core/flight_recorder.hpp
struct TraceEntry;

namespace detail {

// How a group forms: within `bound` (what its errors name as waited), and, when `give_up` is
// set, given up as soon as it returns a reason (asked between the formation's waiting slices).
// grow() gives up when the old group has failed: a member it knows is dead will not come.
struct Formation {
  Duration bound{};
  std::function<std::string()> give_up;
};

class Backend {
 public:
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  Duration timeout() const noexcept { return timeout_; }
  virtual const char* backend_name() const noexcept = 0;
  virtual Device device() const noexcept = 0;

  // The one entry (ProcessGroup::run()): checks, numbering, tracing, then start().
  std::shared_ptr<Work> issue(const OpDescriptor& op);

  // ProcessGroup::abort() and split(): see process_group.hpp.
  virtual void abort(const std::string& reason) = 0;
  // nullptr on ranks outside `ranks`.
  virtual std::unique_ptr<Backend> split(const std::vector<int>& ranks, GroupOptions options) = 0;
  // ProcessGroup::shrink(). Default: InvalidArgument (the backend cannot).
  virtual std::unique_ptr<Backend> shrink(ShrinkOptions options);
  // ProcessGroup::grow() and stop_admitting(). Defaults: InvalidArgument, and nothing (no
  // lobby, so nobody can be waiting). A backend that can grow forwards them to
  // grow_through_lobby() and close_lobby().
  virtual std::unique_ptr<Backend> grow(GrowOptions options);
  virtual void stop_admitting(const std::string& reason);
  // The lobby joiners wait in (core/admission.hpp), named after the group that make_*_group()
  // made. Groups shrunk or grown from that one keep it; split() subgroups have none.
  void set_lobby(std::shared_ptr<Store> lobby, std::string lobby_name);
  void inherit_lobby(const Backend& from) { set_lobby(from.lobby_, from.lobby_name_); }

  bool is_aborted() const noexcept { return failed_.load(std::memory_order_acquire); }
  // The failure that aborted the group, as a copy of its own for the caller
  // (core/error_copy.hpp), or nullptr.
  std::exception_ptr failure() const;

  // Throws InvalidArgument unless t lives on device() (the shape rules check every tensor the
  // op touches on this rank). A backend with more to say (the nccl device index) overrides it.
  virtual void check_device(const Tensor& t, const char* what, const char* op_name) const;
  // Throws InvalidArgument for a valid op this backend cannot honour (a limit stated in
  // process_group.hpp), before the op takes a sequence number. Default: none.
  virtual void check_supported(const OpDescriptor& op, const char* op_name) const;

 protected:
  Backend(int rank, int size, const GroupOptions& options);

  // Runs one op. The descriptor has passed its op's shape rules and the device checks; `call`
  // carries its seq and deadline. Returns the op's Work; throws only for what the backend
  // cannot run (InvalidArgument naming the limit), never after it has sent anything.
  virtual std::shared_ptr<Work> start(const OpDescriptor& op, const OpCall& call) = 0;

  // Records the first failure; later calls rethrow it. Returns false if one was already
  // recorded (the first error stays). Backends call this when they poison the group.
  bool record_failure(std::exception_ptr error) noexcept;
  // Notes in the group's flight recorder that the op started, and with which algorithm
  // (a static string). Backends call it from any thread; a no-op when recording is off.
  void trace_started(const OpCall& call, const char* algorithm) noexcept;
  // Allreduces of at most `bytes` bytes are recorded in the flight recorder by the backend,
  // through trace_issued(), instead of before start(): a backend that may run them on the
  // issuing thread then records their issue and start in one update.
  void record_small_allreduces_late(std::size_t bytes) noexcept { late_record_bytes_ = bytes; }
  // Records the op being issued if its record was left to the backend (a no-op otherwise),
  // as started at its issue time with `algorithm` if that is not null. start() calls it
  // before any other thread may see the op (trace_started() needs the entry).
  void trace_issued(const OpCall& call, const char* algorithm) noexcept;
  // grow() and stop_admitting() for every backend that can form a group over a store namespace
  // (form_grown()), in core/grow.cpp. Only a backend that grows links them (and, with them, the
  // store's classes).
  std::unique_ptr<Backend> grow_through_lobby(GrowOptions options);
  void close_lobby(const std::string& reason);
  // The larger group of grow()'s admission `epoch`, with these ranks, in the lobby's namespace
  // for it (core/admission.hpp); the joiners form theirs the same way. Default: InvalidArgument.
  virtual std::unique_ptr<Backend> form_grown(std::int64_t epoch, int rank, int size,
                                              GroupOptions options, Formation formation);
  const std::shared_ptr<Store>& lobby() const noexcept { return lobby_; }

 private:
  // `late`: the op's record is left to the backend (trace_issued()).
  OpCall begin(const char* name, const std::optional<Duration>& timeout, bool collective,
               TraceEntry& trace, bool late);
  // Records the op's end in the flight recorder when `work` completes; returns `work`.
  std::shared_ptr<Work> traced(const OpCall& call, std::shared_ptr<Work> work);
  FlightRecorder& recorder();
  void rethrow_if_failed() const;

  int rank_;
  int size_;
  std::string name_;
  Duration timeout_;
  // Held from taking a sequence number until the backend has queued the op, so that issue
  // order (seq) is execution order across threads. Recursive: a Work::then() callback that
  // runs inline (the op failed at once) may issue the next op from inside a call.
  std::recursive_mutex issue_mu_;
  std::uint64_t next_seq_ = 1;      // collectives; guarded by issue_mu_
  std::uint64_t next_p2p_seq_ = 1;  // send/recv; guarded by issue_mu_
  std::atomic<bool> failed_{false};
  std::exception_ptr failure_;  // written once, before failed_ is set (release)
  std::atomic<bool> failure_claimed_{false};
  // The last ops, for dumps on failure and SIGUSR1 (CHORUS_TRACE_BUFFER entries). Made on
  // first use: the backend's name is not known while the base is constructed.
  std::size_t trace_capacity_ = 0;
  std::once_flag recorder_once_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::atomic<FlightRecorder*> recorder_made_{nullptr};  // recorder_.get() once made
  std::size_t late_record_bytes_ = 0;                    // record_small_allreduces_late(); 0: none
  // The entry of the op being issued while its record is left to the backend (begin()'s
  // caller's). Guarded by issue_mu_.
  const TraceEntry* unrecorded_ = nullptr;
  std::shared_ptr<Store> lobby_;  // null: this group cannot grow
  std::string lobby_name_;
};

// How chorus's own layers (factories, tests) wrap a backend in the public handle and reach
// the backend behind one.
struct GroupAccess {
  static std::shared_ptr<ProcessGroup> wrap(std::unique_ptr<Backend> backend);
  static Backend& backend(ProcessGroup& group) noexcept { return *group.backend_; }
};

}  // namespace detail
}  // namespace chorus
