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
// staging buffers, unpacking a gathered buffer into a list) has run; then its future
// completes with the op's output tensors, or with the first error. Driven by the chorus ops'
// own then() callbacks, which run on the group's callback thread, never on the engine thread
// that heartbeats: the future's callbacks (DDP's, a comm hook's, the user's Python, which needs
// the GIL) run there, and so does the release of tensors (which may need the GIL too). A thread
// waiting in wait() on a Work nobody asked the future of completes it itself once its ops are
// done, without waiting for the callback thread: whichever gets there first completes it, once.
// No thread per op, no polling.
class ChorusWork final : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
             int source_rank);

  // Arms the callbacks of `parts` (once). `keep` are tensors the ops read or write (staging
  // buffers, flattened inputs) that must live until they complete. With no parts, completes
  // at once.
  static void start(const c10::intrusive_ptr<ChorusWork>& work,
                    std::vector<std::shared_ptr<chorus::Work>> parts,
                    std::function<void()> finisher, std::vector<at::Tensor> keep);

  // Blocks until done and rethrows the op's error. A bounded wait that runs out throws a
  // message naming the op; the op itself keeps running (its own deadline is the group's). An
  // unbounded one waits on the chorus ops first (their own wait() may run the engine's loop
  // on this thread: the latency of a small blocking op).
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  // A recv's sender; for a recv from any source, known once its chorus op completed.
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made on the first call (most ops are only waited on: DDP's gradient buckets ask, a plain
  // dist.all_reduce does not), completed at once if the op already has.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // A chorus op of `self` completed (its then() callback, on a chorus thread).
  static void part_arrived(c10::intrusive_ptr<ChorusWork> self, std::exception_ptr error);
  void part_done(std::exception_ptr error);
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
  std::atomic<int> remaining_{0};
  std::atomic<bool> completing_{false};  // complete() claimed
  std::mutex error_mu_;
  std::exception_ptr first_error_;
  std::function<void()> finisher_;
  std::vector<at::Tensor> keep_;
  // The chorus ops, set once by start(): an unbounded wait() waits on them first, which lets
  // a small op's waiting thread drive the engine (chorus::WorkState::drive_with).
  std::vector<std::shared_ptr<chorus::Work>> parts_;
};

// Called once at interpreter exit (chorus.torch registers it with atexit), without the GIL:
// from then on chorus's threads never touch a Python object (a Work completing later keeps its
// future and tensors, leaked), and this waits up to `bound` for completions that are running
// (their Python callbacks) to end. A thread that asks for the GIL once the interpreter
// finalizes is ended by pthread_exit, and the unwinding aborts the process at the first
// noexcept frame (torch's own, destroying a Python callback): "terminate called without an
// active exception" at exit.
void quiesce_for_exit(std::chrono::milliseconds bound);

}  // namespace chorus::torch_bridge
