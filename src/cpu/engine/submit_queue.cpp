// SPDX-License-Identifier: BSD-3-Clause
// SubmitQueue: the hand-over between user threads and the engine's loop (see submit_queue.hpp
// for who calls what and what the mutex guards).
#include "cpu/engine/submit_queue.hpp"

namespace chorus::cpu {

std::exception_ptr SubmitQueue::push(std::unique_ptr<Op>& op) {
  std::lock_guard lock(mu_);
  if (failure_) {
    return failure_;
  }
  ops_.push_back(std::move(op));
  return nullptr;
}

std::exception_ptr SubmitQueue::take(std::vector<std::unique_ptr<Op>>& ops) {
  std::lock_guard lock(mu_);
  ops.swap(ops_);
  std::exception_ptr request = std::move(abort_request_);
  abort_request_ = nullptr;
  return request;
}

void SubmitQueue::post_abort(std::exception_ptr error) {
  std::lock_guard lock(mu_);
  abort_request_ = std::move(error);
  abort_answered_ = false;
}

void SubmitQueue::wait_abort_answered(Duration bound) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, bound, [&] { return abort_answered_ || closed_; });
}

void SubmitQueue::answer_abort() {
  {
    std::lock_guard lock(mu_);
    abort_answered_ = true;
  }
  cv_.notify_all();
}

void SubmitQueue::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
}

void SubmitQueue::fail(std::exception_ptr error) {
  std::lock_guard lock(mu_);
  failure_ = std::move(error);
  has_failed_.store(true, std::memory_order_release);
}

void SubmitQueue::drain(std::vector<std::unique_ptr<Op>>& into) {
  std::lock_guard lock(mu_);
  for (auto& op : ops_) {
    into.push_back(std::move(op));
  }
  ops_.clear();
}

}  // namespace chorus::cpu
