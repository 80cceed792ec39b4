// SPDX-License-Identifier: BSD-3-Clause
// The torch Work of one torch op, made of one or more chorus ops.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <chorus/work.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace chorus::torch_bridge {

// Completes when every chorus op it is made of has completed and its finisher (copies out of
// staging buffers, unpacking a gathered buffer into a list) has run; then its future, if one
// was asked for, completes with the op's output tensors, or with the first error.
//
// Most torch ops are only waited on (a plain dist.broadcast), so nothing is registered on the
// chorus ops until something needs to hear of their completion without waiting for it: their
// then() callbacks are armed (once) by getFuture() and by a bounded wait(). Armed callbacks run
// on the group's callback thread, never on the engine thread that heartbeats, and complete the
// Work there: the future's callbacks (DDP's, a comm hook's, the user's Python, which needs the
// GIL) run there, and so does the release of tensors (which may need the GIL too). A Work
// armed from inside a completion (a future's callback that issues an op and waits for it) is
// completed by a thread of its own instead, since the callback thread is the one waiting. Unarmed, a
// Work costs no callback-thread wake-up; it is completed by whichever thread first finds its
// ops done: an unbounded wait() (which waits on the ops themselves, so a small op's waiting
// thread drives the engine), isCompleted(), or start() when the ops were done before it
// returned. Those complete it only while no future was asked for: a future's callbacks never
// run on a thread in wait() (one that waits for what that thread does next would deadlock it).
// completing_ makes completion happen once, whoever gets there first. A Work dropped while its
// ops are in flight leaves its finisher and the tensors the ops use to callbacks on those ops,
// so the result still lands in the user's tensors. No thread per op, no polling.
class ChorusWork final : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
             int source_rank);
  // Dropped with its ops in flight (never armed, never completed): hands the finisher and
  // keep_ to then() callbacks on the ops, which run the finisher when they all completed
  // without error and then let go of the tensors.
  ~ChorusWork() override;

  // Hands the Work its chorus ops (`parts`), registering nothing on them. `keep` are tensors the
  // ops read or write (staging buffers, flattened inputs) that must live until they complete.
  // With no parts, or parts that are all done already, completes at once on this thread.
  static void start(const c10::intrusive_ptr<ChorusWork>& work,
                    std::vector<std::shared_ptr<chorus::Work>> parts,
                    std::function<void()> finisher, std::vector<at::Tensor> keep);

  // Blocks until done and rethrows the op's error. An unbounded wait waits on the chorus ops
  // first (their own wait() may run the engine's loop on this thread: the latency of a small
  // blocking op) and arms nothing. A bounded wait arms the callbacks and waits for them; when it
  // runs out it throws a message naming the op, and the op itself keeps running (its own
  // deadline is the group's).
  bool wait(std::chrono::milliseconds timeout) override;
  // Never blocks: if the chorus ops are all done and no future was asked for, completes the
  // Work on this thread (a `while not work.is_completed()` loop ends without a wait()).
  bool isCompleted() override;
  void synchronize() override {}
  // A recv's sender; for a recv from any source, known once its chorus op completed.
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made on the first call (most ops are only waited on: DDP's gradient buckets ask, a plain
  // dist.all_reduce does not), completed at once if the op already has; arms the callbacks,
  // which complete it on the callback thread.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // Registers a then() callback on every chorus op, once; a no-op once completion is claimed.
  // Armed inside a completion (a future's callback issued the op and asks for its future or
  // waits with a bound), it uses arm_on_own_thread() instead.
  void arm();
  // A thread of the Work's own waits for its ops and completes it. For a Work armed by a
  // future's callback: then() callbacks would run on the group's callback thread after the one
  // running, which may be about to wait for this very Work (torch's PowerSGD hook issues an
  // all_reduce in a callback and waits for its future), and would wait for itself. False if no
  // thread could be started.
  bool arm_on_own_thread();
  // A chorus op of `self` completed (its then() callback, on a chorus thread).
  static void part_arrived(c10::intrusive_ptr<ChorusWork> self, std::exception_ptr error);
  void part_done(std::exception_ptr error);
  bool parts_done() const;
  // The first error of the chorus ops, in their order (they are all done).
  std::exception_ptr parts_error() const;
  // Completes the Work on this thread unless a future was asked for (the callback thread
  // completes those) or another thread already does.
  void complete_unless_future(std::exception_ptr error);
  // Completes the Work unless another thread already does (the callback thread and a waiter).
  void complete_once(std::exception_ptr error);
  void complete(std::exception_ptr error);

  const std::string name_;
  const std::vector<at::Tensor> outputs_;
  const int source_rank_;
  void complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future,
                       const std::exception_ptr& error) const;
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by future_mu_
  bool done_ = false;                               // guarded by future_mu_
  std::exception_ptr done_error_;                   // guarded by future_mu_
  std::atomic<bool> armed_{false};                  // arm() ran (or runs)
  std::atomic<int> remaining_{0};                   // armed callbacks yet to arrive, + 1
  std::atomic<bool> completing_{false};             // complete() claimed
  std::mutex error_mu_;
  std::exception_ptr first_error_;  // of the armed callbacks; guarded by error_mu_
  // Owned by complete() once completing_ is claimed, or by ~ChorusWork.
  std::function<void()> finisher_;
  std::vector<at::Tensor> keep_;
  // The chorus ops, set once by start(): an unbounded wait() waits on them first, which lets
  // a small op's waiting thread drive the engine (chorus::WorkState::drive_with).
  std::vector<std::shared_ptr<chorus::Work>> parts_;
};

// Called once at interpreter exit (chorus.torch registers it with atexit), without the GIL:
// from then on chorus's threads never touch a Python object (a Work completing later keeps its
// future and tensors, leaked, as does a Work dropped in flight its staging tensors), and this
// waits up to `bound` for completions that are running (their Python callbacks) to end. A thread
// that asks for the GIL once the interpreter finalizes is ended by pthread_exit, and the
// unwinding aborts the process at the first noexcept frame (torch's own, destroying a Python
// callback): "terminate called without an active exception" at exit.
void quiesce_for_exit(std::chrono::milliseconds bound);

}  // namespace chorus::torch_bridge
