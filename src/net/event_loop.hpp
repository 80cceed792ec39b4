// SPDX-License-Identifier: BSD-3-Clause
// EventLoop: epoll (level-triggered) + an eventfd for cross-thread wakeups + one-shot timers.
// One thread runs the loop; every callback runs on that thread and must not block.
//
// Usage:
//   net::EventLoop loop;
//   loop.add(sock.fd(), EPOLLIN, [&](std::uint32_t ev) { ... });    // loop thread (or before run)
//   loop.modify(sock.fd(), EPOLLIN | EPOLLOUT);
//   auto t = loop.add_timer(Deadline::after(5s), [&] { ... });        // one-shot
//   loop.cancel_timer(t);
//   loop.post([&] { ... });      // from ANY thread: runs soon on the loop thread
//   std::thread th([&] { loop.run(); });  ...  loop.stop(); th.join();   // stop(): any thread
//   // or drive it yourself: while (busy) loop.run_once(deadline);
// remove(fd) is safe inside any callback, including the fd's own; events already fetched for a
// removed fd are dropped (a generation count guards against fd reuse in the same batch).
// A callback that throws is logged at WARN and the loop continues: exceptions never cross it.
#pragma once

#include "core/private.hpp"

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <chorus/deadline.hpp>

namespace chorus::net {

class EventLoop {
 public:
  using IoCallback = std::function<void(std::uint32_t events)>;  // EPOLLIN/OUT/ERR/HUP bits
  using TimerId = std::uint64_t;                                 // 0 is never a valid id

  EventLoop();  // throws NetworkError if epoll/eventfd cannot be created
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Loop thread only (or before the loop runs). The fd stays owned by the caller, who must
  // remove() it before closing it. add() throws NetworkError if epoll_ctl fails (e.g. ENOMEM).
  void add(int fd, std::uint32_t events, IoCallback callback);
  void modify(int fd, std::uint32_t events);
  void remove(int fd) noexcept;
  bool contains(int fd) const noexcept;
  std::size_t num_fds() const noexcept { return num_fds_; }

  // One-shot timer at `when`; loop thread only. Fires on the first iteration at or after it.
  TimerId add_timer(Deadline when, std::function<void()> callback);
  bool cancel_timer(TimerId id) noexcept;  // false if it already fired or was cancelled

  // Thread-safe: queue fn to run on the loop thread and wake the loop.
  void post(std::function<void()> fn);
  // Thread-safe: make a blocked run_once() return soon (or the next one return at once). Only
  // a loop asleep in epoll_wait costs a system call: a loop that is busy, or polling with a zero
  // timeout, finds the request at its next run_once().
  void wakeup() noexcept;

  // Waits for events until `until` or the next timer (whichever is first), dispatches them,
  // runs posted functions and due timers. Returns the number of fd events dispatched, plus
  // one if it was woken (wakeup() or post()).
  int run_once(Deadline until);
  // run_once() without sleeping: dispatches what is ready now. Reads the clock only when
  // timers are set (a transport that spins calls this thousands of times per millisecond).
  int poll_ready();
  // run_once() until stop(). Marks the calling thread as the loop thread.
  void run();
  void stop() noexcept;  // thread-safe; run() returns after the current iteration
  bool stopped() const noexcept { return stop_.load(std::memory_order_acquire); }

 private:
  struct Entry {
    std::uint32_t generation = 0;
    bool active = false;
    std::shared_ptr<IoCallback> callback;  // shared so that remove() during dispatch is safe
  };
  void drain_posted();
  void fire_timers();
  // run_once() after the timeout (milliseconds; -1: none) is known.
  int wait_and_dispatch(int timeout_ms);

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<Entry> entries_;  // indexed by fd; loop thread only
  std::size_t num_fds_ = 0;
  std::uint32_t next_generation_ = 1;
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> timers_;  // loop thread
  std::unordered_map<TimerId, Clock::time_point> timer_index_;                     // loop thread
  TimerId next_timer_ = 1;
  std::vector<epoll_event> events_;
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;  // guarded by post_mu_
  std::atomic<bool> stop_{false};
  // wakeup() and run_once() meet through these two flags (each side writes its own, then reads
  // the other's, all sequentially consistent): either the waker sees the loop asleep and writes
  // the eventfd, or the loop sees the request before it sleeps.
  std::atomic<bool> wake_requested_{false};
  std::atomic<bool> asleep_{false};
};

}  // namespace chorus::net
