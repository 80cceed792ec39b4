// SPDX-License-Identifier: BSD-3-Clause
// Measuring a host's links, caching the figures per host, and agreeing on them in a group.
#include "cpu/bootstrap/link_costs.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/env.hpp"
#include "core/logging.hpp"
#include "core/reduce.hpp"
#include "cpu/bootstrap/host_id.hpp"
#include "cpu/bootstrap/membership.hpp"

namespace chorus::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The fastest of `reps` runs of `body` (the machine is shared: the fastest run is the one
// least disturbed), in seconds.
double fastest(int reps, const std::function<void()>& body) {
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    body();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Buffers the size of a pipeline slice's working set, so the figures are those of data in
// the last-level cache, as a slice moving through the rings is.
constexpr std::size_t kProbeBytes = 1 << 20;
constexpr int kBandwidthReps = 8;

double memcpy_gbps() {
  std::vector<std::byte> a(kProbeBytes, std::byte{1}), b(kProbeBytes);
  const double s = fastest(kBandwidthReps, [&] { std::memcpy(b.data(), a.data(), kProbeBytes); });
  return kProbeBytes / s / 1e9;
}

double reduce_gbps() {
  std::vector<float> a(kProbeBytes / sizeof(float), 1.0f), b(a.size(), 2.0f);
  const double s = fastest(kBandwidthReps, [&] {
    reduce(b.data(), b.data(), a.data(), a.size(), DataType::float32, ReduceOp::sum);
  });
  return kProbeBytes / s / 1e9;
}

// process_vm_readv from this process, in the direct algorithms' 128 KiB pieces.
std::optional<double> peer_copy_gbps() {
  constexpr std::size_t kPiece = 128 * 1024;
  std::vector<std::byte> a(kProbeBytes, std::byte{1}), b(kProbeBytes);
  bool ok = true;
  const double s = fastest(kBandwidthReps, [&] {
    for (std::size_t off = 0; off < kProbeBytes; off += kPiece) {
      iovec local{b.data() + off, kPiece};
      iovec remote{a.data() + off, kPiece};
      ok = ok &&
           ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(kPiece);
    }
  });
  if (!ok) {
    return std::nullopt;
  }
  return kProbeBytes / s / 1e9;
}

// Half the round trip (median of 40) of two threads that each sleep on a futex word until the
// other wakes them: what a round costs through shared memory when the waiting rank has gone to
// sleep.
double futex_round_us() {
  constexpr int kTrips = 40;
  std::atomic<int> turn{0};  // odd: the helper's move
  std::thread helper([&] {
    for (int i = 0; i < kTrips; ++i) {
      int seen = turn.load();
      while (seen % 2 == 0) {
        turn.wait(seen);
        seen = turn.load();
      }
      turn.store(seen + 1);
      turn.notify_one();
    }
  });
  std::vector<double> trips;
  for (int i = 0; i < kTrips; ++i) {
    const auto t0 = Clock::now();
    turn.store(2 * i + 1);
    turn.notify_one();
    int seen = turn.load();
    while (seen != 2 * i + 2) {
      turn.wait(seen);
      seen = turn.load();
    }
    trips.push_back(seconds_since(t0));
  }
  helper.join();
  return median(trips) / 2 * 1e6;
}

// A connected loopback tcp pair, or nothing.
struct SocketPair {
  int a = -1;
  int b = -1;
  ~SocketPair() {
    if (a >= 0) {
      ::close(a);
    }
    if (b >= 0) {
      ::close(b);
    }
  }
};

bool make_loopback_pair(SocketPair& p) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) {
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::listen(listener, 1) == 0 &&
            ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (ok) {
    p.a = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = p.a >= 0 && ::connect(p.a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  if (ok) {
    pollfd pfd{listener, POLLIN, 0};
    ok = ::poll(&pfd, 1, 1000) == 1;  // the connection is queued already; never waits long
    p.b = ok ? ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    ok = p.b >= 0;
  }
  ::close(listener);
  const int one = 1;
  for (int fd : {p.a, p.b}) {
    if (fd >= 0) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
  }
  return ok;
}

// Reads or writes exactly `bytes`, waiting at most 1 s for each step.
bool move_all(int fd, std::byte* data, std::size_t bytes, bool write) {
  std::size_t done = 0;
  while (done < bytes) {
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, 1000) != 1) {
      return false;
    }
    const ssize_t n = write ? ::send(fd, data + done, bytes - done, MSG_NOSIGNAL)
                            : ::recv(fd, data + done, bytes - done, 0);
    if (n <= 0) {
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Half a 1-byte round trip (median of 30), and the throughput of a 1 MiB stream (the fastest
// of three), over loopback tcp.
std::optional<LinkCost> loopback_tcp() {
  SocketPair p;
  if (!make_loopback_pair(p)) {
    return std::nullopt;
  }
  constexpr int kTrips = 30;
  constexpr std::size_t kStreamBytes = 1 << 20;
  constexpr int kStreams = 3;
  std::atomic<bool> helper_ok{true};
  std::thread helper([&] {
    std::byte token{};
    for (int i = 0; i < kTrips && helper_ok; ++i) {
      helper_ok = move_all(p.b, &token, 1, false) && move_all(p.b, &token, 1, true);
    }
    std::vector<std::byte> sink(kStreamBytes);
    for (int i = 0; i < kStreams && helper_ok; ++i) {
      helper_ok = move_all(p.b, sink.data(), kStreamBytes, false) && move_all(p.b, &token, 1, true);
    }
  });
  bool ok = true;
  std::vector<double> trips;
  std::byte token{};
  for (int i = 0; i < kTrips && ok; ++i) {
    const auto t0 = Clock::now();
    ok = move_all(p.a, &token, 1, true) && move_all(p.a, &token, 1, false);
    trips.push_back(seconds_since(t0));
  }
  std::vector<std::byte> source(kStreamBytes, std::byte{1});
  double stream_s = 1e9;
  for (int i = 0; i < kStreams && ok; ++i) {
    const auto t0 = Clock::now();
    ok = move_all(p.a, source.data(), kStreamBytes, true) && move_all(p.a, &token, 1, false);
    stream_s = std::min(stream_s, seconds_since(t0));
  }
  if (!ok) {
    ::shutdown(p.a, SHUT_RDWR);  // the helper's next wait ends at once
  }
  helper.join();
  if (!ok || !helper_ok) {
    return std::nullopt;
  }
  return LinkCost{median(trips) / 2 * 1e6, kStreamBytes / stream_s / 1e9};
}

std::optional<std::filesystem::path> cache_file() {
  std::filesystem::path dir;
  if (const auto xdg = env::get("XDG_CACHE_HOME")) {
    dir = *xdg;
  } else if (const auto home = env::get("HOME")) {
    dir = std::filesystem::path(*home) / ".cache";
  } else {
    return std::nullopt;
  }
  const std::size_t host = std::hash<std::string>{}(local_host_id());
  return dir / "chorus" / fmt::format("link_costs-{:016x}", host);
}

std::optional<LinkCosts> read_cache() {
  const auto file = cache_file();
  if (!file) {
    return std::nullopt;
  }
  std::ifstream in(*file);
  std::string line;
  if (!std::getline(in, line)) {
    return std::nullopt;
  }
  return parse_link_costs(line);
}

// Best effort: written whole under a temporary name, then renamed, so concurrent groups on
// the host never read half a file.
void write_cache(const LinkCosts& costs) {
  const auto file = cache_file();
  if (!file) {
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(file->parent_path(), ec);
  const auto tmp = file->string() + fmt::format(".{}", ::getpid());
  {
    std::ofstream out(tmp);
    out << format_link_costs(costs) << '\n';
    if (!out) {
      return;
    }
  }
  std::filesystem::rename(tmp, *file, ec);
}

// What rank 0 uses, by CHORUS_LINK_COSTS.
LinkCosts choose_local() {
  const std::string mode = env::get("CHORUS_LINK_COSTS").value_or("cached");
  if (mode == "default") {
    return default_link_costs();
  }
  if (mode != "measure") {
    if (mode != "cached") {
      CHORUS_WARN(coll, "CHORUS_LINK_COSTS='{}' is not default, measure or cached; using cached",
                  mode);
    }
    if (auto cached = read_cache()) {
      return *cached;
    }
  }
  const auto t0 = Clock::now();
  const LinkCosts measured = measure_link_costs();
  CHORUS_INFO(coll, "link costs measured in {:.1f} ms: {}", seconds_since(t0) * 1e3,
              format_link_costs(measured));
  write_cache(measured);
  return measured;
}

// Once per process: every later group (each split, each torch new_group) on rank 0 of this
// process reuses the figures instead of reading the cache file, or probing, again.
LinkCosts local_choice() {
  static const LinkCosts chosen = choose_local();
  return chosen;
}

}  // namespace

LinkCosts measure_link_costs() {
  LinkCosts c = default_link_costs();
  // The round trips are taken in batches between the other parts, and the median batch counts:
  // neither a moment when other work held the CPUs (a wake-up then waits for a time slice, 10x
  // the figure) nor one when the waiting thread never went to sleep (a quarter of it) may set
  // this host's rounds in its cache for good.
  std::vector<double> futex_us{futex_round_us()};
  c.memcpy_gbps = memcpy_gbps();
  futex_us.push_back(futex_round_us());
  c.reduce_gbps = reduce_gbps();
  futex_us.push_back(futex_round_us());
  if (const auto pc = peer_copy_gbps()) {
    c.peer_copy_gbps = *pc;
  }
  std::vector<double> tcp_alpha_us;
  double tcp_gbps = 0;
  for (int batch = 0; batch < 3; ++batch) {
    futex_us.push_back(futex_round_us());
    if (const auto t = loopback_tcp()) {
      tcp_alpha_us.push_back(t->alpha_us);
      tcp_gbps = std::max(tcp_gbps, t->gbps);
    }
  }
  futex_us.push_back(futex_round_us());
  // A byte through the rings is copied in by the writer and out (or reduced out) by the reader.
  c.shm = {median(futex_us), c.memcpy_gbps / 2};
  if (!tcp_alpha_us.empty()) {
    c.socket = {median(tcp_alpha_us), tcp_gbps};
  }
  c.host_cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  return c;
}

std::string format_link_costs(const LinkCosts& c) {
  return fmt::format(
      "v1 shm={:.3f}/{:.3f} socket={:.3f}/{:.3f} network={:.3f}/{:.3f} peer_copy={:.3f} "
      "memcpy={:.3f} reduce={:.3f} cpus={}",
      c.shm.alpha_us, c.shm.gbps, c.socket.alpha_us, c.socket.gbps, c.network.alpha_us,
      c.network.gbps, c.peer_copy_gbps, c.memcpy_gbps, c.reduce_gbps, c.host_cpus);
}

std::optional<LinkCosts> parse_link_costs(std::string_view text) {
  LinkCosts c;
  const std::string s(text);
  int used = 0;
  const int fields = std::sscanf(
      s.c_str(),
      "v1 shm=%lf/%lf socket=%lf/%lf network=%lf/%lf peer_copy=%lf memcpy=%lf reduce=%lf "
      "cpus=%lf%n",
      &c.shm.alpha_us, &c.shm.gbps, &c.socket.alpha_us, &c.socket.gbps, &c.network.alpha_us,
      &c.network.gbps, &c.peer_copy_gbps, &c.memcpy_gbps, &c.reduce_gbps, &c.host_cpus, &used);
  if (fields != 10 || c.host_cpus < 1 || static_cast<std::size_t>(used) != s.size()) {
    return std::nullopt;
  }
  for (double v : {c.shm.gbps, c.socket.gbps, c.network.gbps, c.peer_copy_gbps, c.memcpy_gbps,
                   c.reduce_gbps}) {
    if (!(v > 0) || !std::isfinite(v)) {
      return std::nullopt;
    }
  }
  for (double v : {c.shm.alpha_us, c.socket.alpha_us, c.network.alpha_us}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return std::nullopt;
    }
  }
  return c;
}

LinkCosts agree_on_link_costs(Store& store, const std::string& epoch, int rank, Deadline deadline) {
  if (epoch.empty()) {
    return default_link_costs();  // one rank: nothing to choose, nothing to measure
  }
  // One of the formation's records: the last member out removes it with the others
  // (leave_group), so no key outlives its group.
  const std::string key = epoch_key(epoch, kLinkCostsRecord);
  if (rank == 0) {
    // What the others will parse, to the digit: a figure that differed in its last bit could
    // tip a choice at a crossover.
    const LinkCosts costs =
        parse_link_costs(format_link_costs(local_choice())).value_or(default_link_costs());
    store.set(key, format_link_costs(costs));
    return costs;
  }
  const std::string text = to_string(store.get(key, deadline.remaining()));
  const auto costs = parse_link_costs(text);
  if (!costs) {
    // Same build on every rank, so only a foreign writer gets here: use what every rank can.
    CHORUS_WARN(coll, "rank 0's link costs '{}' are malformed; using the defaults", text);
    return default_link_costs();
  }
  return *costs;
}

}  // namespace chorus::cpu
