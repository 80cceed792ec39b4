// SPDX-License-Identifier: BSD-3-Clause
// Executor: runs one Schedule on a Transport. A pure state machine (no I/O, no clock, no
// threads): whoever drives the transport feeds completions back with complete(token).
#pragma once

#include "core/private.hpp"

#include <cstdint>
#include <optional>
#include <vector>

#include "core/signature.hpp"
#include "cpu/plan/schedule.hpp"
#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

// A peer's signature header did not match ours.
struct SignatureMismatch {
  int peer = -1;
  std::optional<OpSignature> theirs;  // nullopt: the bytes were not a signature at all
};

class Executor {
 public:
  // Tokens are token_base + task index; token_base must leave the low 32 bits zero.
  Executor(Transport& transport, Schedule& schedule, std::uint64_t token_base);
  // Ready to run the schedule again, rebuilt for another op (Schedule::clear()), with new
  // tokens; keeps this executor's memory. Not while a transfer of the last run is in flight.
  void restart(std::uint64_t token_base);

  // Posts everything that is ready and runs ready local work. A signature header whose
  // stream carries data sends is held until the first of them is ready, so that both leave in
  // one write (a header sent alone costs a system call, and the peer a wake-up, per step of a
  // small op); release_headers() sends the held ones alone.
  void start();
  // Sends every held header now, and later ones as soon as they are ready: the peers then see
  // a mismatched op even where this rank's data sends wait for data that never comes.
  void release_headers();
  // Some header is held (release_headers() would send it).
  bool holds_headers() const noexcept;
  // A transfer of this executor completed. Runs what became ready.
  void complete(std::uint64_t token);
  bool owns(std::uint64_t token) const noexcept { return (token >> 32) == (token_base_ >> 32); }

  bool done() const noexcept { return remaining_ == 0 && !failed(); }
  // A signature mismatch, or a call, read or write task that failed (local_failure()).
  bool failed() const noexcept { return mismatch_.has_value() || local_failure_.has_value(); }
  const std::optional<SignatureMismatch>& mismatch() const noexcept { return mismatch_; }
  const std::optional<LocalFailure>& local_failure() const noexcept { return local_failure_; }

  // Peers with receives not yet complete (posted or not): whom this op is waiting for.
  std::vector<int> waiting_for_recv() const;
  // Peers with sends not yet complete (they are not reading).
  std::vector<int> waiting_for_send() const;

 private:
  void finish(TaskId id);
  void ready(TaskId id);
  void run_local(TaskId id);
  void run_worklist();
  void pump_send(int peer);
  bool held(int peer) const noexcept;
  void pump_recv(int peer);
  // Posts a read or write task to the one-sided capability: true if it completed at once;
  // false if it is in flight (its token completes it) or failed (local_failure()).
  bool post_one_sided(TaskId id, const Task& t);
  // What a recv_reduce task reduces, as the transport takes it.
  ReduceOnArrival arrival(const Task& t) const;
  // A wire send: narrows its data into the peer's next staging slot and posts it; false (and
  // nothing posted) while that slot's last send is still in flight.
  bool post_wire_send(int peer, TaskId id, Task& t);
  // A wire transfer completed: frees a send's slot, widens what a receive brought.
  void wire_arrived(TaskId id, Task& t);

  Transport& transport_;
  Schedule& schedule_;
  std::uint64_t token_base_ = 0;
  // per task: 0 waiting, 1 ready, 2 posted, 3 done, 4 posted as a plain receive to be reduced
  // on completion (a recv_reduce the transport cannot reduce on arrival)
  std::vector<std::uint8_t> state_;
  std::vector<std::uint32_t> send_pos_;  // per peer: next FIFO index to post
  std::vector<std::uint32_t> recv_pos_;
  std::vector<TaskId> worklist_;  // ready local tasks
  // Wire sends (Schedule::staging_slot): per peer, the next slot to take and which are in use.
  std::vector<std::uint32_t> staging_turn_;
  std::vector<std::uint8_t> staging_busy_;  // peer * kWireStagingSlots + slot
  bool hold_headers_ = true;
  std::size_t remaining_ = 0;
  std::optional<SignatureMismatch> mismatch_;
  std::optional<LocalFailure> local_failure_;
};

}  // namespace chorus::cpu
