// SPDX-License-Identifier: BSD-3-Clause
// epoll loop with eventfd wakeups, a timer map, and generation-checked dispatch.
#include "net/event_loop.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/logging.hpp"
#include "net/socket.hpp"

namespace chorus::net {
namespace {
constexpr std::uint32_t kWakeFdMarker = 0xffffffffu;  // generation used for the eventfd

std::uint64_t pack(int fd, std::uint32_t generation) {
  return (static_cast<std::uint64_t>(generation) << 32) | static_cast<std::uint32_t>(fd);
}
}  // namespace

EventLoop::EventLoop() : events_(256) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    throw NetworkError(fmt::format("epoll_create1 failed: {}", errno_name(errno)));
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int err = errno;
    ::close(epoll_fd_);
    throw NetworkError(fmt::format("eventfd failed: {}", errno_name(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = pack(wake_fd_, kWakeFdMarker);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    const int err = errno;
    ::close(wake_fd_);
    ::close(epoll_fd_);
    throw NetworkError(fmt::format("epoll_ctl(eventfd) failed: {}", errno_name(err)));
  }
}

EventLoop::~EventLoop() {
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void EventLoop::add(int fd, std::uint32_t events, IoCallback callback) {
  if (fd < 0) {
    throw InvalidArgument("EventLoop::add: negative fd");
  }
  if (static_cast<std::size_t>(fd) >= entries_.size()) {
    entries_.resize(static_cast<std::size_t>(fd) + 64);
  }
  Entry& e = entries_[static_cast<std::size_t>(fd)];
  if (e.active) {
    throw InvalidArgument(fmt::format("EventLoop::add: fd {} is already registered", fd));
  }
  e.generation = next_generation_++;
  if (next_generation_ == kWakeFdMarker) {
    next_generation_ = 1;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = pack(fd, e.generation);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw NetworkError(fmt::format("epoll_ctl(ADD, fd {}) failed: {}", fd, errno_name(errno)));
  }
  e.active = true;
  e.callback = std::make_shared<IoCallback>(std::move(callback));
  ++num_fds_;
}

void EventLoop::modify(int fd, std::uint32_t events) {
  if (!contains(fd)) {
    return;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = pack(fd, entries_[static_cast<std::size_t>(fd)].generation);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
    CHORUS_WARN(net, "epoll_ctl(MOD, fd {}) failed: {}", fd, errno_name(errno));
  }
}

void EventLoop::remove(int fd) noexcept {
  if (!contains(fd)) {
    return;
  }
  Entry& e = entries_[static_cast<std::size_t>(fd)];
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  e.active = false;
  e.callback.reset();
  --num_fds_;
}

bool EventLoop::contains(int fd) const noexcept {
  return fd >= 0 && static_cast<std::size_t>(fd) < entries_.size() &&
         entries_[static_cast<std::size_t>(fd)].active;
}

EventLoop::TimerId EventLoop::add_timer(Deadline when, std::function<void()> callback) {
  const TimerId id = next_timer_++;
  timers_.emplace(std::make_pair(when.when(), id), std::move(callback));
  timer_index_.emplace(id, when.when());
  return id;
}

bool EventLoop::cancel_timer(TimerId id) noexcept {
  auto it = timer_index_.find(id);
  if (it == timer_index_.end()) {
    return false;
  }
  timers_.erase(std::make_pair(it->second, id));
  timer_index_.erase(it);
  return true;
}

void EventLoop::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    posted_.push_back(std::move(fn));
  }
  wakeup();
}

void EventLoop::wakeup() noexcept {
  wake_requested_.store(true);
  if (asleep_.load()) {
    const std::uint64_t one = 1;
    // EAGAIN means the counter is already non-zero: the loop will wake anyway.
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void EventLoop::drain_posted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) {
    try {
      fn();
    } catch (const std::exception& e) {
      CHORUS_WARN(net, "event loop: a posted task threw: {}", e.what());
    }
  }
}

void EventLoop::fire_timers() {
  if (timers_.empty()) {
    return;
  }
  const auto now = Clock::now();
  while (!timers_.empty()) {
    auto it = timers_.begin();
    if (it->first.first > now) {
      break;
    }
    auto fn = std::move(it->second);
    timer_index_.erase(it->first.second);
    timers_.erase(it);
    try {
      fn();
    } catch (const std::exception& e) {
      CHORUS_WARN(net, "event loop: a timer callback threw: {}", e.what());
    }
  }
}

int EventLoop::run_once(Deadline until) {
  Clock::time_point wake = until.when();
  if (!timers_.empty() && timers_.begin()->first.first < wake) {
    wake = timers_.begin()->first.first;
  }
  int timeout_ms = -1;
  if (wake != Clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(wake - Clock::now());
    // Round up: waking a little late is fine, waking early and spinning is not.
    timeout_ms = left.count() <= 0
                     ? 0
                     : static_cast<int>(std::min<long long>((left.count() + 999) / 1000, INT_MAX));
  }
  return wait_and_dispatch(timeout_ms);
}

int EventLoop::poll_ready() {
  if (!timers_.empty()) {
    return run_once(Deadline::after(Duration::zero()));
  }
  return wait_and_dispatch(0);
}

int EventLoop::wait_and_dispatch(int timeout_ms) {
  // A wakeup() since the last call makes this one a poll. A loop about to sleep says so first,
  // then looks for a request once more (see wakeup()).
  bool woken = wake_requested_.exchange(false);
  if (woken) {
    timeout_ms = 0;
  } else if (timeout_ms != 0) {
    asleep_.store(true);
    if (wake_requested_.exchange(false)) {
      woken = true;
      timeout_ms = 0;
    }
  }
  const int n =
      ::epoll_wait(epoll_fd_, events_.data(), static_cast<int>(events_.size()), timeout_ms);
  asleep_.store(false, std::memory_order_relaxed);
  if (n < 0 && errno != EINTR) {
    CHORUS_WARN(net, "epoll_wait failed: {}", errno_name(errno));
  }
  int dispatched = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t data = events_[static_cast<std::size_t>(i)].data.u64;
    const int fd = static_cast<int>(data & 0xffffffffu);
    const auto generation = static_cast<std::uint32_t>(data >> 32);
    if (generation == kWakeFdMarker && fd == wake_fd_) {
      std::uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof(count));
      woken = true;
      continue;
    }
    if (!contains(fd) || entries_[static_cast<std::size_t>(fd)].generation != generation) {
      continue;  // removed (and maybe reused) earlier in this batch
    }
    std::shared_ptr<IoCallback> cb = entries_[static_cast<std::size_t>(fd)].callback;
    ++dispatched;
    try {
      (*cb)(events_[static_cast<std::size_t>(i)].events);
    } catch (const std::exception& e) {
      CHORUS_WARN(net, "event loop: callback for fd {} threw: {}", fd, e.what());
    }
  }
  if (n == static_cast<int>(events_.size()) && events_.size() < 4096) {
    events_.resize(events_.size() * 2);
  }
  // A request made while this call ran is answered by its return: the caller looks at what
  // was asked after it (the flag would otherwise end the next call at once for nothing).
  if (wake_requested_.exchange(false)) {
    woken = true;
  }
  if (woken) {
    drain_posted();
  }
  fire_timers();
  return dispatched + (woken ? 1 : 0);
}

void EventLoop::run() {
  while (!stop_.load(std::memory_order_acquire)) {
    run_once(Deadline::never());
  }
  drain_posted();
}

void EventLoop::stop() noexcept {
  stop_.store(true, std::memory_order_release);
  wakeup();
}

}  // namespace chorus::net
