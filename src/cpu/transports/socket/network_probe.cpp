// SPDX-License-Identifier: BSD-3-Clause
// Timing the links between hosts at group setup (network_probe.hpp).
#include "cpu/transports/socket/network_probe.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/env.hpp"
#include "core/logging.hpp"
#include "cpu/bootstrap/host_id.hpp"
#include "cpu/bootstrap/link_costs.hpp"
#include "cpu/transports/socket/mesh.hpp"

namespace chorus::cpu {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Enough round trips for a median, and streams long enough to leave TCP's slow start behind on
// a 10 Gbit/s link yet last about 4 ms each on a 1 Gbit/s one; the faster stream counts.
constexpr int kTrips = 8;
constexpr std::size_t kStreamBytes = 512 * 1024;
constexpr int kStreams = 2;
constexpr std::byte kProbeFollows{'P'};
constexpr std::byte kNoProbe{'S'};
// How often a wait looks whether the other direction failed (then it stops at once).
constexpr int kLookMs = 50;

class ProbeFailed : public std::exception {
 public:
  explicit ProbeFailed(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// Reads or writes exactly `bytes` on a non-blocking socket; throws ProbeFailed when the link
// fails, `deadline` passes or `stop` is set (the other direction failed).
void move_exactly(int fd, std::byte* data, std::size_t bytes, bool write, Deadline deadline,
                  const std::atomic<bool>& stop) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = write ? ::send(fd, data + done, bytes - done, MSG_NOSIGNAL)
                            : ::recv(fd, data + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      throw ProbeFailed("the peer closed the link");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw ProbeFailed(fmt::format("{}", std::strerror(errno)));
    }
    if (stop) {
      throw ProbeFailed("stopped");
    }
    if (deadline.expired()) {
      throw ProbeFailed("no answer before the group's setup deadline");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<long long>(kLookMs, left.count() + 1)));
  }
}

double elapsed_s(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// The prober's side: half the median round trip, and the faster stream's rate with one round
// trip (its first byte's way out and the acknowledgement's back) taken off.
LinkCost measure_link(int fd, Deadline deadline, const std::atomic<bool>& stop) {
  std::byte token = kProbeFollows;
  move_exactly(fd, &token, 1, true, deadline, stop);
  std::vector<double> trips;
  for (int i = 0; i < kTrips; ++i) {
    const auto t0 = SteadyClock::now();
    move_exactly(fd, &token, 1, true, deadline, stop);
    move_exactly(fd, &token, 1, false, deadline, stop);
    trips.push_back(elapsed_s(t0));
  }
  std::sort(trips.begin(), trips.end());
  const double trip = trips[trips.size() / 2];
  std::vector<std::byte> source(kStreamBytes, std::byte{1});
  double best = 1e9;
  for (int i = 0; i < kStreams; ++i) {
    const auto t0 = SteadyClock::now();
    move_exactly(fd, source.data(), kStreamBytes, true, deadline, stop);
    move_exactly(fd, &token, 1, false, deadline, stop);
    best = std::min(best, elapsed_s(t0));
  }
  const double stream_s = std::max(best - trip, best / 2);
  return LinkCost{trip / 2 * 1e6, kStreamBytes / stream_s / 1e9};
}

// The answering side: whatever the prober's first byte says.
void answer_probe(int fd, Deadline deadline, const std::atomic<bool>& stop) {
  std::byte token{};
  move_exactly(fd, &token, 1, false, deadline, stop);
  if (token != kProbeFollows) {
    return;
  }
  for (int i = 0; i < kTrips; ++i) {
    move_exactly(fd, &token, 1, false, deadline, stop);
    move_exactly(fd, &token, 1, true, deadline, stop);
  }
  std::vector<std::byte> sink(kStreamBytes);
  for (int i = 0; i < kStreams; ++i) {
    move_exactly(fd, sink.data(), kStreamBytes, false, deadline, stop);
    move_exactly(fd, &token, 1, true, deadline, stop);
  }
}

// The peer's host as the cache knows it: its address without the port.
std::string host_part(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// What the prober does by CHORUS_NETWORK_PROBE and CHORUS_LINK_COSTS: probe (true), or take
// `known` (false; nullopt: no figure).
bool should_probe(const std::string& peer_host, std::optional<LinkCost>& known) {
  const std::string mode = link_costs_mode();
  if (mode == "default") {
    return false;
  }
  const std::string setting = env::get("CHORUS_NETWORK_PROBE").value_or("on");
  if (setting != "on" && setting != "off") {
    CHORUS_WARN(coll, "CHORUS_NETWORK_PROBE='{}' is not on or off; probing", setting);
  }
  if (mode == "cached") {
    known = cached_network(local_host_id(), peer_host);
  }
  return setting != "off" && (mode == "measure" || !known);
}

int first_data_socket(Mesh& mesh, int peer) {
  const PeerLink& link = mesh.peers.at(static_cast<std::size_t>(peer));
  if (link.data.empty() || !link.data.front()) {
    throw NetworkError(fmt::format("the network probe found no data link to rank {}", peer));
  }
  return link.data.front().fd();
}

}  // namespace

bool probes_next_neighbour(int rank, int size, const std::vector<int>& host_of) {
  if (size < 2) {
    return false;
  }
  const int next = (rank + 1) % size;
  if (host_of.at(static_cast<std::size_t>(next)) == host_of.at(static_cast<std::size_t>(rank))) {
    return false;
  }
  return size > 2 || rank < next;
}

std::vector<int> network_probers(int size, const std::vector<int>& host_of) {
  std::vector<int> out;
  for (int r = 0; r < size; ++r) {
    if (probes_next_neighbour(r, size, host_of)) {
      out.push_back(r);
    }
  }
  return out;
}

std::optional<LinkCost> probe_ring_network(Mesh& mesh, int rank, int size,
                                           const std::vector<int>& host_of, Deadline deadline) {
  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;
  const bool probes = probes_next_neighbour(rank, size, host_of);
  const bool answers = probes_next_neighbour(prev, size, host_of);
  if (!probes && !answers) {
    return std::nullopt;
  }
  std::atomic<bool> stop{false};
  std::exception_ptr answer_error;
  std::thread answerer;
  if (answers) {
    const int fd = first_data_socket(mesh, prev);
    answerer = std::thread([&, fd] {
      try {
        answer_probe(fd, deadline, stop);
      } catch (...) {
        answer_error = std::current_exception();
        stop = true;
      }
    });
  }
  std::optional<LinkCost> figure;
  std::exception_ptr probe_error;
  if (probes) {
    const std::string peer_host = host_part(mesh.peers.at(static_cast<std::size_t>(next)).address);
    try {
      const int fd = first_data_socket(mesh, next);
      std::optional<LinkCost> known;
      if (should_probe(peer_host, known)) {
        const auto t0 = SteadyClock::now();
        figure = measure_link(fd, deadline, stop);
        CHORUS_INFO(coll, "rank {}: the network to rank {} ({}) measured in {:.1f} ms: {}", rank,
                    next, peer_host, elapsed_s(t0) * 1e3, format_link_cost(*figure));
        cache_network(local_host_id(), peer_host, *figure);
      } else {
        std::byte token = kNoProbe;
        move_exactly(fd, &token, 1, true, deadline, stop);
        figure = known;
      }
    } catch (...) {
      probe_error = std::current_exception();
      stop = true;
    }
  }
  if (answerer.joinable()) {
    answerer.join();
  }
  for (const auto& [error, peer] : {std::pair{probe_error, next}, std::pair{answer_error, prev}}) {
    if (!error) {
      continue;
    }
    try {
      std::rethrow_exception(error);
    } catch (const ProbeFailed& e) {
      if (std::string_view(e.what()) == "stopped") {
        continue;  // the other direction's failure is the one to name
      }
      throw NetworkError(
          fmt::format("rank {}: the network probe with rank {} at {} failed: {}", rank, peer,
                      mesh.peers.at(static_cast<std::size_t>(peer)).address, e.what()),
          ErrorContext{.rank = rank, .size = size, .op = "connect", .peers = {peer}});
    }
  }
  return figure;
}

}  // namespace chorus::cpu
