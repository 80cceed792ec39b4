// SPDX-License-Identifier: BSD-3-Clause
#include "torch_work.hpp"

#include <chorus/errors.hpp>

#include <cstdio>
#include <thread>

namespace chorus::torch_bridge {
namespace {

// quiesce_for_exit(): completions on chorus threads enter this region (seq_cst on both sides,
// so either the exit sees the entry and waits for it, or the entry sees the exit and backs out).
std::atomic<bool> g_exiting{false};
std::atomic<int> g_completing{0};

// How many Work completions this thread is inside: a future's callbacks (DDP's, a comm
// hook's, the user's) run within them, so a Work armed while it is non-zero is armed by one.
thread_local int tl_completing_depth = 0;

struct CompletingHere {
  CompletingHere() { ++tl_completing_depth; }
  ~CompletingHere() { --tl_completing_depth; }
  CompletingHere(const CompletingHere&) = delete;
  CompletingHere& operator=(const CompletingHere&) = delete;
};

bool enter_python_region() {
  g_completing.fetch_add(1);
  if (g_exiting.load()) {
    g_completing.fetch_sub(1);
    return false;
  }
  return true;
}

}  // namespace

void quiesce_for_exit(std::chrono::milliseconds bound) {
  g_exiting.store(true);
  const auto until = std::chrono::steady_clock::now() + bound;
  while (g_completing.load() > 0) {
    if (std::chrono::steady_clock::now() >= until) {
      std::fprintf(stderr,
                   "chorus: a torch Work's completion (its future's callbacks) still runs at "
                   "interpreter exit after %lld ms; exiting anyway\n",
                   static_cast<long long>(bound.count()));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polled, bounded, once
  }
}

ChorusWork::ChorusWork(int rank, c10d::OpType type, std::string name,
                       std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type),
      name_(std::move(name)),
      outputs_(std::move(outputs)),
      source_rank_(source_rank) {}

namespace {

// What a Work dropped with its ops in flight leaves behind: the copy into the user's tensors
// and the tensors the ops read and write, until the last op completes.
struct Leftover {
  std::function<void()> finisher;
  std::vector<at::Tensor> keep;
  std::atomic<int> remaining{0};
  std::atomic<bool> failed{false};
};

// An op of a dropped Work completed (its then() callback: on the callback thread, or inline on
// the thread that dropped the Work if the op was done by then).
void leftover_arrived(std::shared_ptr<Leftover> left, bool failed) {
  if (!enter_python_region()) {
    (void)new std::shared_ptr<Leftover>(std::move(left));  // exiting: leak the tensors (GIL)
    return;
  }
  if (failed) {
    left->failed.store(true, std::memory_order_relaxed);
  }
  if (left->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (!left->failed.load(std::memory_order_relaxed) && left->finisher) {
      try {
        left->finisher();
      } catch (...) {
        // Nobody holds the Work to hear of it; gloo drops a dropped Work's errors too.
      }
    }
    left->finisher = nullptr;
    left->keep.clear();
  }
  left.reset();  // may free tensors: inside the region
  g_completing.fetch_sub(1);
}

}  // namespace

ChorusWork::~ChorusWork() {
  // An armed Work's callbacks hold it until they have run, and the last one completes it, so
  // only a Work that nobody armed gets here uncompleted. Nothing else holds it: no race.
  if (completing_.load(std::memory_order_acquire) || (!finisher_ && keep_.empty())) {
    return;
  }
  auto left = std::make_shared<Leftover>();
  left->finisher = std::move(finisher_);
  left->keep = std::move(keep_);
  left->remaining.store(static_cast<int>(parts_.size()), std::memory_order_relaxed);
  for (const auto& part : parts_) {
    part->then([left](chorus::Work& w) mutable {
      leftover_arrived(std::move(left), w.exception() != nullptr);
    });
  }
}

void ChorusWork::start(const c10::intrusive_ptr<ChorusWork>& work,
                       std::vector<std::shared_ptr<chorus::Work>> parts,
                       std::function<void()> finisher, std::vector<at::Tensor> keep) {
  work->finisher_ = std::move(finisher);
  work->keep_ = std::move(keep);
  work->parts_ = std::move(parts);  // before the Work is handed out
  // Ops already done (world size 1, an allreduce through the board): complete now, the Work is
  // nobody else's yet.
  if (work->parts_done()) {
    work->complete_once(work->parts_error());
  }
}

bool ChorusWork::parts_done() const {
  for (const auto& part : parts_) {
    if (!part->is_completed()) {
      return false;
    }
  }
  return true;
}

std::exception_ptr ChorusWork::parts_error() const {
  for (const auto& part : parts_) {
    if (auto error = part->exception()) {
      return error;
    }
  }
  return nullptr;
}

void ChorusWork::arm() {
  if (completing_.load(std::memory_order_acquire) ||
      armed_.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  if (tl_completing_depth > 0 && arm_on_own_thread()) {
    return;
  }
  // One extra count held while arming, so a part that is already done (its callback runs here,
  // inline) cannot complete the Work before every callback is registered.
  remaining_.store(static_cast<int>(parts_.size()) + 1, std::memory_order_relaxed);
  for (const auto& part : parts_) {
    part->then([self = c10::intrusive_ptr<ChorusWork>::unsafe_reclaim_from_nonowning(this)](
                   chorus::Work& w) mutable { part_arrived(std::move(self), w.exception()); });
  }
  part_done(nullptr);
}

bool ChorusWork::arm_on_own_thread() {
  auto self = c10::intrusive_ptr<ChorusWork>::unsafe_reclaim_from_nonowning(this);
  try {
    std::thread([self]() mutable {
      std::exception_ptr first_error;
      for (const auto& part : self->parts_) {
        try {
          part->synchronize();  // the host waits (for a CPU op: wait(), may drive the engine)
        } catch (...) {
          if (!first_error) {
            first_error = std::current_exception();
          }
        }
      }
      if (!enter_python_region()) {
        (void)self.release();  // the interpreter is exiting: neither complete nor free
        return;
      }
      {
        CompletingHere here;
        self->complete_once(first_error);
        self.reset();  // may free tensors: inside the region
      }
      g_completing.fetch_sub(1);
    }).detach();
  } catch (const std::system_error&) {
    return false;  // no thread to be had: the callbacks, as for any other Work
  }
  return true;
}

void ChorusWork::part_arrived(c10::intrusive_ptr<ChorusWork> self, std::exception_ptr error) {
  if (!enter_python_region()) {
    (void)self.release();  // the interpreter is exiting: neither complete nor free (the GIL)
    return;
  }
  CompletingHere here;
  self->part_done(std::move(error));
  self.reset();  // may free tensors: inside the region
  g_completing.fetch_sub(1);
}

void ChorusWork::part_done(std::exception_ptr error) {
  if (error) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!first_error_) {
      first_error_ = error;
    }
  }
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;
  }
  std::exception_ptr first;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    first = first_error_;
  }
  complete_once(first);
}

void ChorusWork::complete_unless_future(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (future_) {
      return;
    }
  }
  complete_once(std::move(error));
}

void ChorusWork::complete_once(std::exception_ptr error) {
  if (!completing_.exchange(true, std::memory_order_acq_rel)) {
    complete(std::move(error));
  }
}

void ChorusWork::complete(std::exception_ptr error) {
  if (!error && finisher_) {
    try {
      finisher_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finisher_ = nullptr;
  keep_.clear();
  finish(error);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    done_ = true;
    done_error_ = error;
    future = future_;
  }
  if (future) {
    complete_future(future, error);
  }
}

void ChorusWork::complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                                 const std::exception_ptr& error) const {
  if (error) {
    future->setError(error);
  } else {
    future->markCompleted(c10::IValue(outputs_));
  }
}

int ChorusWork::sourceRank() const {
  if (source_rank_ >= 0 || parts_.empty()) {
    return source_rank_;
  }
  return parts_.front()->source_rank();
}

c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  static const auto tensor_list = c10::ListType::create(c10::TensorType::get());
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(tensor_list);
      if (done_) {
        // Nobody else holds this future yet, so no callback runs under the lock.
        complete_future(future_, done_error_);
      }
    }
    future = future_;
  }
  // From now on only the callbacks complete the Work (a thread in wait() or isCompleted() no
  // longer does). Ops already done run their callback here, before anyone else has the future.
  arm();
  return future;
}

bool ChorusWork::isCompleted() {
  if (c10d::Work::isCompleted()) {
    return true;
  }
  if (!completing_.load(std::memory_order_acquire) && parts_done()) {
    complete_unless_future(parts_error());
  }
  return c10d::Work::isCompleted();
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero()) {
    std::exception_ptr first_error;
    for (const auto& part : parts_) {
      try {
        part->wait();
      } catch (...) {
        if (!first_error) {
          first_error = std::current_exception();
        }
      }
    }
    // Every op is done: finish here rather than wait for the callback thread to (it may be
    // busy running a user's callback). Not when a future was asked for: completing it would run
    // its callbacks on this thread, and one that waits for what this thread does after wait()
    // would wait for itself; the callback thread completes it.
    complete_unless_future(first_error);
  } else {
    arm();  // the callbacks complete it; this thread only waits, up to the bound
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout <= std::chrono::milliseconds::zero()) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw TimeoutError("chorus: " + name_ +
                       ": Work.wait(timeout=" + std::to_string(timeout.count()) +
                       " ms) returned before the op completed; the op is still running under "
                       "the group's timeout");
  }
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  return true;
}

}  // namespace chorus::torch_bridge
