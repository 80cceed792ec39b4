// SPDX-License-Identifier: BSD-3-Clause
// Executor: dependency counting, FIFO posting per peer, inline copies and reductions.
// A recv_reduce is offered to the transport to reduce on arrival; where it declines, the
// receive lands in the task's slot and the reduction runs when it completes. Reads and writes
// go to the transport's one-sided capability when ready and complete inline or by token.
#include "cpu/engine/executor.hpp"

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/reduce.hpp"
#include "core/wire.hpp"

namespace chorus::cpu {
namespace {
constexpr std::uint8_t kWaiting = 0;
constexpr std::uint8_t kReady = 1;
constexpr std::uint8_t kPosted = 2;
constexpr std::uint8_t kDone = 3;
// A recv_reduce the transport could not reduce on arrival: posted as a receive into its slot,
// reduced on completion.
constexpr std::uint8_t kPostedStaged = 4;
}  // namespace

Executor::Executor(Transport& transport, Schedule& schedule, std::uint64_t token_base)
    : transport_(transport), schedule_(schedule) {
  restart(token_base);
}

void Executor::restart(std::uint64_t token_base) {
  token_base_ = token_base;
  state_.assign(schedule_.tasks().size(), kWaiting);
  send_pos_.assign(static_cast<std::size_t>(schedule_.size()), 0);
  recv_pos_.assign(static_cast<std::size_t>(schedule_.size()), 0);
  staging_turn_.assign(static_cast<std::size_t>(schedule_.size()), 0);
  staging_busy_.assign(static_cast<std::size_t>(schedule_.size()) * Schedule::kWireStagingSlots, 0);
  worklist_.clear();
  hold_headers_ = true;
  remaining_ = schedule_.tasks().size();
  mismatch_.reset();
  local_failure_.reset();
}

void Executor::start() {
  auto& tasks = schedule_.tasks();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].deps == 0) {
      ready(static_cast<TaskId>(i));
    }
  }
  run_worklist();
}

void Executor::run_worklist() {
  while (!worklist_.empty() && !failed()) {
    const TaskId id = worklist_.back();
    worklist_.pop_back();
    run_local(id);
  }
}

void Executor::ready(TaskId id) {
  Task& t = schedule_.tasks()[static_cast<std::size_t>(id)];
  state_[static_cast<std::size_t>(id)] = kReady;
  switch (t.kind) {
    case TaskKind::send:
      pump_send(t.peer);
      break;
    case TaskKind::recv:
    case TaskKind::recv_reduce:
      pump_recv(t.peer);
      break;
    case TaskKind::copy:
    case TaskKind::reduce:
    case TaskKind::call:
    case TaskKind::round:
    // Posted from the worklist, not here: one that completes inline finishes at once, and
    // finishing inside ready() would recurse down a chain of them.
    case TaskKind::read:
    case TaskKind::write:
      worklist_.push_back(id);
      break;
  }
}

// Posts the head of the peer's send FIFO while it is ready: later sends never overtake it.
// A header waits for the data send behind it (start()).
void Executor::pump_send(int peer) {
  const auto& fifo = schedule_.send_fifo(peer);
  auto& pos = send_pos_[static_cast<std::size_t>(peer)];
  while (pos < fifo.size() && state_[static_cast<std::size_t>(fifo[pos])] == kReady) {
    if (held(peer)) {
      break;
    }
    const TaskId id = fifo[pos];
    Task& t = schedule_.tasks()[static_cast<std::size_t>(id)];
    if (t.wire) {
      if (!post_wire_send(peer, id, t)) {
        break;  // its staging slot frees when an earlier send completes (wire_arrived())
      }
    } else {
      transport_.post_send(peer, t.src, t.size, token_base_ + static_cast<std::uint64_t>(id));
    }
    ++pos;
    state_[static_cast<std::size_t>(id)] = kPosted;
  }
}

bool Executor::post_wire_send(int peer, TaskId id, Task& t) {
  const std::size_t slots = Schedule::kWireStagingSlots;
  const auto k = static_cast<std::uint8_t>(staging_turn_[static_cast<std::size_t>(peer)] % slots);
  std::uint8_t& busy = staging_busy_[static_cast<std::size_t>(peer) * slots + k];
  if (busy != 0) {
    return false;
  }
  busy = 1;
  ++staging_turn_[static_cast<std::size_t>(peer)];
  t.staging = k;
  std::byte* slot = schedule_.staging_slot(peer, k);
  narrow(slot, t.src, t.size / element_size(schedule_.dtype()), schedule_.dtype(),
         schedule_.wire_dtype());
  transport_.post_send(peer, slot, schedule_.wire_bytes(t),
                       token_base_ + static_cast<std::uint64_t>(id));
  return true;
}

void Executor::wire_arrived(TaskId id, Task& t) {
  const DataType dt = schedule_.dtype();
  const DataType wire = schedule_.wire_dtype();
  if (t.kind == TaskKind::send) {
    staging_busy_[static_cast<std::size_t>(t.peer) * Schedule::kWireStagingSlots + t.staging] = 0;
  } else if (t.kind == TaskKind::recv) {
    widen_from_tail(t.dst, t.size / element_size(dt), dt, wire);
  } else {
    CHORUS_CHECK(state_[static_cast<std::size_t>(id)] == kPostedStaged,
                 "wire recv_reduce {} was not staged", id);
    reduce_from_wire(t.dst, t.src, t.src2, t.size, dt, wire,
                     schedule_.op() == ReduceOp::avg ? t.divisor : 0);
  }
}

// The head of the peer's send FIFO is a ready header whose first data send is not ready.
bool Executor::held(int peer) const noexcept {
  const auto& fifo = schedule_.send_fifo(peer);
  const std::uint32_t pos = send_pos_[static_cast<std::size_t>(peer)];
  return hold_headers_ && pos + 1 < fifo.size() &&
         schedule_.tasks()[static_cast<std::size_t>(fifo[pos])].header &&
         state_[static_cast<std::size_t>(fifo[pos])] == kReady &&
         state_[static_cast<std::size_t>(fifo[pos + 1])] != kReady;
}

void Executor::release_headers() {
  hold_headers_ = false;
  for (int p = 0; p < schedule_.size(); ++p) {
    pump_send(p);
  }
}

bool Executor::holds_headers() const noexcept {
  for (int p = 0; p < schedule_.size(); ++p) {
    if (held(p)) {
      return true;
    }
  }
  return false;
}

void Executor::pump_recv(int peer) {
  const auto& fifo = schedule_.recv_fifo(peer);
  auto& pos = recv_pos_[static_cast<std::size_t>(peer)];
  while (pos < fifo.size() && state_[static_cast<std::size_t>(fifo[pos])] == kReady) {
    const TaskId id = fifo[pos++];
    state_[static_cast<std::size_t>(id)] = kPosted;
    const Task& t = schedule_.tasks()[static_cast<std::size_t>(id)];
    const std::uint64_t token = token_base_ + static_cast<std::uint64_t>(id);
    if (t.kind == TaskKind::recv) {
      // A wire receive lands in the end of dst and is widened into place (wire_arrived()).
      const std::size_t bytes = schedule_.wire_bytes(t);
      transport_.post_recv(peer, static_cast<std::byte*>(t.dst) + (t.size - bytes), bytes, token);
      continue;
    }
    if (t.wire) {
      state_[static_cast<std::size_t>(id)] = kPostedStaged;
      transport_.post_recv(peer, const_cast<void*>(t.src2), schedule_.wire_bytes(t), token);
      continue;
    }
    if (!transport_.post_recv_reduce(peer, arrival(t), token)) {
      // src2 is the op's own scratch slot (Schedule::recv_reduce): writable.
      state_[static_cast<std::size_t>(id)] = kPostedStaged;
      transport_.post_recv(peer, const_cast<void*>(t.src2),
                           t.size * element_size(schedule_.dtype()), token);
    }
  }
}

ReduceOnArrival Executor::arrival(const Task& t) const {
  return {t.dst, t.src, t.size, schedule_.dtype(), schedule_.op(), t.divisor, t.local_first};
}

void Executor::run_local(TaskId id) {
  const Task& t = schedule_.tasks()[static_cast<std::size_t>(id)];
  if (t.kind == TaskKind::copy) {
    if (t.size > 0) {
      std::memcpy(t.dst, t.src, t.size);
    }
  } else if (t.kind == TaskKind::call) {
    local_failure_ = schedule_.local_work(t.size)();
    if (local_failure_) {
      return;
    }
  } else if (t.kind == TaskKind::round) {
    round_through_wire(t.dst, t.size, schedule_.dtype(), schedule_.wire_dtype());
  } else if (t.kind == TaskKind::read || t.kind == TaskKind::write) {
    if (!post_one_sided(id, t)) {
      return;  // in flight (complete() finishes it), or failed
    }
  } else {
    reduce(t.dst, t.src, t.src2, t.size, schedule_.dtype(), schedule_.op(), t.divisor);
  }
  finish(id);
}

bool Executor::post_one_sided(TaskId id, const Task& t) {
  OneSided* one_sided = transport_.one_sided();
  CHORUS_CHECK(one_sided != nullptr, "a one-sided task on a transport without the capability");
  const std::uint64_t token = token_base_ + static_cast<std::uint64_t>(id);
  const OneSidedResult r =
      t.kind == TaskKind::read
          ? one_sided->post_read(t.peer, *t.key, t.offset, t.dst, t.size, token)
          : one_sided->post_write(t.peer, *t.key, t.offset, t.src, t.size, token);
  if (r.pending) {
    state_[static_cast<std::size_t>(id)] = kPosted;
    return false;
  }
  if (!r.error.empty()) {
    local_failure_ = LocalFailure{
        t.peer, fmt::format("{}; CHORUS_ALGO can force an algorithm that does not reach into the "
                            "peers' memory (e.g. allreduce=ring)",
                            r.error)};
    return false;
  }
  return true;
}

void Executor::finish(TaskId id) {
  auto& tasks = schedule_.tasks();
  state_[static_cast<std::size_t>(id)] = kDone;
  --remaining_;
  const Task& t = tasks[static_cast<std::size_t>(id)];
  if (t.header && t.kind == TaskKind::recv) {
    const auto theirs = decode_signature(schedule_.received_header(t.peer));
    if (!theirs || !(*theirs == schedule_.signature())) {
      mismatch_ = SignatureMismatch{t.peer, theirs};
      return;
    }
  }
  const auto& succ = schedule_.successors();
  for (std::uint32_t i = 0; i < t.succ_count; ++i) {
    const TaskId s = succ[t.succ_begin + i];
    if (--tasks[static_cast<std::size_t>(s)].deps == 0) {
      ready(s);
    }
  }
}

void Executor::complete(std::uint64_t token) {
  if (failed()) {
    return;
  }
  const auto id = static_cast<TaskId>(token - token_base_);
  CHORUS_CHECK(id >= 0 && static_cast<std::size_t>(id) < state_.size() &&
                   (state_[static_cast<std::size_t>(id)] == kPosted ||
                    state_[static_cast<std::size_t>(id)] == kPostedStaged),
               "completion of task {} which is not in flight", id);
  Task& t = schedule_.tasks()[static_cast<std::size_t>(id)];
  if (t.wire) {
    wire_arrived(id, t);
  } else if (state_[static_cast<std::size_t>(id)] == kPostedStaged) {
    reduce_arrived(arrival(t), t.dst, t.src, t.src2, t.size);
  }
  finish(id);
  if (t.wire && t.kind == TaskKind::send && !failed()) {
    pump_send(t.peer);  // a send may have waited for the slot this one freed
  }
  run_worklist();
}

std::vector<int> Executor::waiting_for_recv() const {
  std::vector<int> peers;
  for (int p = 0; p < schedule_.size(); ++p) {
    for (TaskId id : schedule_.recv_fifo(p)) {
      if (state_[static_cast<std::size_t>(id)] != kDone) {
        peers.push_back(p);
        break;
      }
    }
  }
  return peers;
}

std::vector<int> Executor::waiting_for_send() const {
  std::vector<int> peers;
  for (int p = 0; p < schedule_.size(); ++p) {
    for (TaskId id : schedule_.send_fifo(p)) {
      if (state_[static_cast<std::size_t>(id)] != kDone) {
        peers.push_back(p);
        break;
      }
    }
  }
  return peers;
}

}  // namespace chorus::cpu
