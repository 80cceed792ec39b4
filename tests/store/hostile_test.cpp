// SPDX-License-Identifier: BSD-3-Clause
// The store server under hostile clients (loopback only): each attack runs against a server in
// its own process with small, configured budgets, and asserts that the server's peak RSS stays
// under a bound and that a good client's ping is still answered while the attack connections
// are open. Sizes are scaled down from docs/protocol.md's defaults so that the suite is fast;
// the mechanisms (budgets, deferral, eviction, timeouts) are the same ones.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "net/frame.hpp"
#include "net/listener.hpp"
#include "store/protocol.hpp"
#include "support/multiproc.hpp"

using namespace std::chrono_literals;
using namespace chorus;

namespace {

constexpr std::size_t kMiB = 1u << 20;

// The budgets every attack runs against (scaled-down defaults).
TcpStoreServerOptions hostile_options() {
  TcpStoreServerOptions o;
  o.max_value_bytes = 1 * kMiB;
  o.max_unread_reply_bytes = 4 * kMiB;
  o.max_reply_bytes = 2 * kMiB;
  o.max_buffered_bytes = 32 * kMiB;
  o.max_connections = 1000;
  o.hello_timeout = 1s;
  o.stall_timeout = 3s;
  return o;
}

// "VmHWM" (peak) or "VmRSS" (now) of a process, in KiB; 0 if unreadable.
std::size_t proc_status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoul(line.substr(field.size() + 1));
    }
  }
  return 0;
}

// A blocking loopback connection (-1 on failure, e.g. out of fds).
int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};  // every blocking call on it is bounded
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_bytes(int fd, const std::vector<std::uint8_t>& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::vector<std::uint8_t> hello_bytes() {
  std::vector<std::uint8_t> h(store::kHelloBytes);
  store::encode_hello({store::kProtocolVersion, 0}, h.data());
  return h;
}

std::vector<std::uint8_t> request_bytes(store::Request q) {
  std::vector<std::uint8_t> out;
  store::encode_request(q, out);
  return out;
}

// Open attack connections, closed on destruction.
struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) {
      ::close(fd);
    }
  }
};

// How many more fds this process can open, keeping a margin for the test itself.
std::size_t fd_headroom() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const std::size_t limit =
      rl.rlim_cur == RLIM_INFINITY ? 65536 : static_cast<std::size_t>(rl.rlim_cur);
  return limit > 256 ? limit - 256 : 0;
}

// A good client: a fresh connection and one ping, answered within a generous bound.
void require_good_client_served(std::uint16_t port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 20s;
  o.counts_as_client = false;
  TcpStore good(o);
  REQUIRE(good.ping() < 20s);
  good.set("good-key", std::string_view("good-value"));
  REQUIRE(good.get_string("good-key") == "good-value");
}

TcpStore client_of(std::uint16_t port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 20s;
  o.max_value_bytes = 1 * kMiB;
  return TcpStore(o);
}

// The server's peak RSS must stay within `budget` of what it used before the attack.
void require_peak_rss_under(const test::StoreServerProcess& server, std::size_t baseline_kib,
                            std::size_t budget) {
  const std::size_t peak = proc_status_kib(server.pid(), "VmHWM");
  INFO("server peak RSS " << peak / 1024 << " MiB, baseline " << baseline_kib / 1024 << " MiB");
  REQUIRE(peak > 0);
  REQUIRE(peak < baseline_kib + budget / 1024);
}

// 16 connections that pipeline 60 gets of `key` each and never read a reply (16 x 60 replies of
// a 1 MiB value: 960 MiB if every reply were built), added to `fds`.
void flood_with_unread_gets(std::uint16_t port, const std::string& key, Fds& fds) {
  for (int c = 0; c < 16; ++c) {
    const int fd = raw_connect(port);
    REQUIRE(fd >= 0);
    fds.fds.push_back(fd);
    // Small receive buffer: the kernel absorbs little, the server must hold the rest back.
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    auto bytes = hello_bytes();
    for (std::uint32_t i = 0; i < 60; ++i) {
      store::Request q;
      q.op = store::Op::get;
      q.id = i + 1;
      q.keys = {key};
      auto r = request_bytes(q);
      bytes.insert(bytes.end(), r.begin(), r.end());
    }
    REQUIRE(send_bytes(fd, bytes));
  }
}

// Reads one reply frame for a request of `op` from a blocking fd (bounded by its SO_RCVTIMEO);
// false on a timeout, EOF or a frame that does not decode.
bool read_reply(int fd, store::Op op, store::Reply& reply) {
  std::uint8_t header[4];
  if (::recv(fd, header, sizeof(header), MSG_WAITALL) != static_cast<ssize_t>(sizeof(header))) {
    return false;
  }
  std::vector<std::uint8_t> payload(net::get_u32(header));
  if (!payload.empty() && ::recv(fd, payload.data(), payload.size(), MSG_WAITALL) !=
                              static_cast<ssize_t>(payload.size())) {
    return false;
  }
  store::DecodeError error;
  return store::decode_reply(op, payload, reply, error);
}

}  // namespace

TEST_CASE("hostile: 500 connections announcing ~2 MiB frames cost nothing until bytes come",
          "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  Fds attack;
  const std::size_t n = std::min<std::size_t>(500, fd_headroom());
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    attack.fds.push_back(fd);
    auto bytes = hello_bytes();
    bytes.resize(bytes.size() + 4);
    net::put_u32(bytes.data() + store::kHelloBytes, 2 * kMiB);  // just under the frame limit
    REQUIRE(send_bytes(fd, bytes));
  }
  require_good_client_served(server.port());
  // 500 x 2 MiB = 1 GiB if the declared length were allocated.
  require_peak_rss_under(server, baseline, 48 * kMiB);
  // Stalled partial frames are closed after stall_timeout: after the hello answer the attacker
  // reads EOF (SO_RCVTIMEO is 10 s, the stall timeout 3 s).
  std::uint8_t answer[store::kHelloBytes];
  REQUIRE(::recv(attack.fds.front(), answer, sizeof(answer), MSG_WAITALL) == sizeof(answer));
  char byte;
  REQUIRE(::recv(attack.fds.front(), &byte, 1, 0) == 0);
}

TEST_CASE("hostile: pipelined big gets that are never read stay within the budgets",
          "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  {
    TcpStore setup = client_of(server.port());
    setup.set("big", Bytes(1 * kMiB, 7));
  }
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  {
    Fds attack;
    flood_with_unread_gets(server.port(), "big", attack);
    // 16 x 60 x 1 MiB = 960 MiB if every reply were built.
    require_good_client_served(server.port());
    require_peak_rss_under(server, baseline, 96 * kMiB);
  }
  // Once the attackers are gone the memory goes back to the OS (observable, bounded wait).
  const Deadline d = Deadline::after(20s);
  while (proc_status_kib(server.pid(), "VmRSS") > baseline + 16 * 1024 && !d.expired()) {
    std::this_thread::sleep_for(50ms);  // polling an observable condition
  }
  INFO("RSS after the attackers left: " << proc_status_kib(server.pid(), "VmRSS") / 1024 << " MiB");
  REQUIRE(proc_status_kib(server.pid(), "VmRSS") <= baseline + 16 * 1024);
}

// A get_with parks on a missing key while the keys it reads with it are small; they then grow
// past max_reply_bytes, and a flood of unread replies fills the server's budget. When the key
// comes, the reply that goes out is a short too_large error, priced as such: it is served from
// the connection's reserve at once, not held until the flood's connections stall out.
TEST_CASE(
    "hostile: a parked get_with grown past the reply limit is refused at once while a "
    "flood holds the budget",
    "[store][hostile]") {
  TcpStoreServerOptions options = hostile_options();
  options.stall_timeout = 120s;  // the flood holds the budget for the whole test
  test::StoreServerProcess server(options);
  TcpStore setup = client_of(server.port());
  setup.set("big", Bytes(1 * kMiB, 7));

  Fds waiter;
  waiter.fds.push_back(raw_connect(server.port()));
  const int fd = waiter.fds.front();
  REQUIRE(fd >= 0);
  auto bytes = hello_bytes();
  store::Request q;
  q.op = store::Op::get_with;
  q.id = 1;
  q.keys = {"go", "grows0", "grows1", "grows2"};
  q.timeout_ms = 60'000;
  auto r = request_bytes(q);
  bytes.insert(bytes.end(), r.begin(), r.end());
  // Requests on one connection are served in order: the answer to this check means the
  // get_with before it is parked.
  store::Request c;
  c.op = store::Op::check;
  c.id = 2;
  c.keys = {"go"};
  r = request_bytes(c);
  bytes.insert(bytes.end(), r.begin(), r.end());
  REQUIRE(send_bytes(fd, bytes));
  std::uint8_t hello[store::kHelloBytes];
  REQUIRE(::recv(fd, hello, sizeof(hello), MSG_WAITALL) == sizeof(hello));
  store::Reply checked;
  REQUIRE(read_reply(fd, store::Op::check, checked));
  REQUIRE(checked.id == 2);

  for (int k = 0; k < 3; ++k) {
    setup.set("grows" + std::to_string(k), Bytes(1 * kMiB, 1));  // 3 MiB: over the 2 MiB limit
  }
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  Fds flood;
  flood_with_unread_gets(server.port(), "big", flood);
  // The flood holds most of the 32 MiB budget (observable through the server's RSS).
  const Deadline full = Deadline::after(20s);
  while (proc_status_kib(server.pid(), "VmRSS") < baseline + 24 * 1024 && !full.expired()) {
    std::this_thread::sleep_for(20ms);  // polling an observable condition
  }
  INFO("server RSS grew by " << (proc_status_kib(server.pid(), "VmRSS") - baseline) / 1024
                             << " MiB under the flood");
  REQUIRE_FALSE(full.expired());

  setup.set("go", std::string_view("1"));
  // Within the fd's 10 s receive bound; priced at the would-be 3 MiB it would wait for the
  // flood's 120 s stall timeout.
  store::Reply answer;
  REQUIRE(read_reply(fd, store::Op::get_with, answer));
  REQUIRE(answer.id == 1);
  REQUIRE(answer.status == store::ReplyStatus::error);
  REQUIRE(answer.error == store::ErrorKind::too_large);
  INFO(answer.message);
  REQUIRE(answer.message.find("max_reply_bytes") != std::string::npos);
}

TEST_CASE("hostile: a client filling the store is refused at max_stored_bytes; deletes make room",
          "[store][hostile]") {
  TcpStoreServerOptions options = hostile_options();
  options.max_stored_bytes = 16 * kMiB;
  test::StoreServerProcess server(options);
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  TcpStore client = client_of(server.port());
  const Bytes value(256 * 1024, 3);
  int stored = 0;
  std::string refusal;
  for (int i = 0; i < 1000 && refusal.empty(); ++i) {  // 1000 x 256 KiB = 250 MiB unbounded
    try {
      client.set("fill/" + std::to_string(i), value);
      ++stored;
    } catch (const StoreError& e) {
      refusal = e.what();
    }
  }
  INFO("stored " << stored << " values of 256 KiB; refusal: " << refusal);
  REQUIRE_THAT(refusal, Catch::Contains("the store is full") &&
                            Catch::Contains("max_stored_bytes") &&
                            Catch::Contains("nothing was stored"));
  CHECK(stored >= 60);  // 16 MiB / (256 KiB + key + 64): 63 fit
  CHECK(stored <= 64);
  // Nothing of the refused write was kept; an append past the limit is refused too.
  CHECK_FALSE(client.check({"fill/" + std::to_string(stored)}));
  CHECK_THROWS_AS(client.append("fill/1", value), StoreError);
  CHECK(client.get("fill/1", 5s) == value);
  // Deleting makes room again; reads and deletes work while full.
  REQUIRE(client.get("fill/0", 5s) == value);
  REQUIRE(client.delete_key("fill/0"));
  client.set("fill/again", value);
  require_good_client_served(server.port());
  require_peak_rss_under(server, baseline, 64 * kMiB);
}

TEST_CASE("hostile: a multi_get naming one big key 60 times is refused before it is built",
          "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  TcpStore good = client_of(server.port());
  good.set("big", Bytes(1 * kMiB, 7));
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  REQUIRE_THROWS_WITH(good.multi_get(std::vector<std::string>(60, "big")),
                      Catch::Contains("max_reply_bytes"));
  // The same from 100 connections that never read: nothing is built.
  Fds attack;
  for (int c = 0; c < 100; ++c) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    attack.fds.push_back(fd);
    store::Request q;
    q.op = store::Op::multi_get;
    q.id = 1;
    q.keys = std::vector<std::string>(60, "big");
    auto bytes = hello_bytes();
    auto r = request_bytes(q);
    bytes.insert(bytes.end(), r.begin(), r.end());
    REQUIRE(send_bytes(fd, bytes));
  }
  REQUIRE(good.ping() < 20s);
  REQUIRE(good.multi_get({"big"}).size() == 1);  // within max_reply_bytes: served
  require_peak_rss_under(server, baseline, 48 * kMiB);
}

TEST_CASE("hostile: many pipelined keys requests on many keys neither freeze nor bloat it",
          "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  {
    TcpStore setup = client_of(server.port());
    std::vector<std::string> keys;
    std::vector<Bytes> values;
    for (int i = 0; i < 20000; ++i) {
      keys.push_back("some/longish/key/name/" + std::to_string(i));
      values.push_back(Bytes{1});
    }
    setup.multi_set(keys, values);
  }
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  Fds attack;
  for (int c = 0; c < 8; ++c) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    attack.fds.push_back(fd);
    auto bytes = hello_bytes();
    for (std::uint32_t i = 0; i < 200; ++i) {
      store::Request q;
      q.op = store::Op::list_keys;
      q.id = i + 1;
      auto r = request_bytes(q);
      bytes.insert(bytes.end(), r.begin(), r.end());
    }
    REQUIRE(send_bytes(fd, bytes));
  }
  // 8 x 200 x ~560 KB = 900 MB of replies if all were built.
  require_good_client_served(server.port());
  require_peak_rss_under(server, baseline, 96 * kMiB);
}

TEST_CASE("hostile: idle hello-only connections at the limit do not lock a good client out",
          "[store][hostile]") {
  TcpStoreServerOptions o = hostile_options();
  o.max_connections = 200;
  test::StoreServerProcess server(o);
  Fds attack;
  const std::size_t n = std::min<std::size_t>(1000, fd_headroom());
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = raw_connect(server.port());
    if (fd < 0) {
      break;
    }
    attack.fds.push_back(fd);
    (void)send_bytes(fd, hello_bytes());  // may fail once the server evicted it
  }
  REQUIRE(attack.fds.size() > 2 * o.max_connections);
  require_good_client_served(server.port());
  // A client that has done a request is not an idle stranger: it survives further waves.
  TcpStore member = client_of(server.port());
  member.set("member", std::string_view("1"));
  Fds wave;
  const std::size_t more = fd_headroom() > n ? std::min<std::size_t>(300, fd_headroom() - n) : 0;
  for (std::size_t i = 0; i < more; ++i) {
    const int fd = raw_connect(server.port());
    if (fd >= 0) {
      wave.fds.push_back(fd);
      (void)send_bytes(fd, hello_bytes());
    }
  }
  REQUIRE(member.get_string("member") == "1");
}

TEST_CASE("hostile: connections that never say hello are closed after hello_timeout",
          "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  Fds silent;
  for (int i = 0; i < 10; ++i) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    silent.fds.push_back(fd);
  }
  for (int fd : silent.fds) {
    char byte;
    // SO_RCVTIMEO is 10 s; the server closes at ~1 s: recv returns 0 (EOF), not -1 (timeout).
    REQUIRE(::recv(fd, &byte, 1, 0) == 0);
  }
  require_good_client_served(server.port());
}

TEST_CASE("hostile: random frames close only their own connections", "[store][hostile]") {
  test::StoreServerProcess server(hostile_options());
  const std::size_t baseline = proc_status_kib(server.pid(), "VmRSS");
  std::mt19937 rng(20261201);
  Fds attack;
  for (int c = 0; c < 200; ++c) {
    const int fd = raw_connect(server.port());
    REQUIRE(fd >= 0);
    attack.fds.push_back(fd);
    std::vector<std::uint8_t> bytes = (c % 4 == 0) ? std::vector<std::uint8_t>{} : hello_bytes();
    const std::size_t len = rng() % 4096;
    for (std::size_t i = 0; i < len; ++i) {
      bytes.push_back(static_cast<std::uint8_t>(rng()));
    }
    if (c % 3 == 0 && bytes.size() >= 12) {
      // A plausible header and op, random body.
      net::put_u32(bytes.data() + 8, static_cast<std::uint32_t>(bytes.size() - 12));
      bytes[12 % bytes.size()] = static_cast<std::uint8_t>(1 + rng() % 14);
    }
    (void)send_bytes(fd, bytes);  // the server may close it half-way
  }
  require_good_client_served(server.port());
  require_peak_rss_under(server, baseline, 48 * kMiB);
}

TEST_CASE("hostile: the client refuses a server's 2 GB frame with StoreError, allocating nothing",
          "[store][hostile]") {
  auto listener = net::Listener::bind("127.0.0.1", 0);
  std::thread fake([&] {
    // A fake server: valid handshake, then a reply header announcing 2,000,000,000 bytes.
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, 20'000) != 1) {
      std::fprintf(stderr, "fake server: nobody connected\n");
      return;
    }
    net::AcceptResult a = listener.accept();
    if (!a.io.ok()) {
      std::fprintf(stderr, "fake server: accept failed: %s\n", a.io.describe().c_str());
      return;
    }
    const int fd = a.socket.fd();
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::uint8_t hello[store::kHelloBytes];
    const ssize_t got = ::recv(fd, hello, sizeof(hello), MSG_WAITALL);
    if (got != static_cast<ssize_t>(sizeof(hello))) {
      std::fprintf(stderr, "fake server: hello recv returned %zd errno %d\n", got, errno);
      return;
    }
    store::encode_hello({store::kProtocolVersion, 0}, hello);
    std::vector<std::uint8_t> out(hello, hello + sizeof(hello));
    out.resize(out.size() + 4);
    net::put_u32(out.data() + store::kHelloBytes, 2'000'000'000u);
    out.resize(out.size() + 64, 0);
    (void)send_bytes(fd, out);
    std::uint8_t sink[256];
    while (::recv(fd, sink, sizeof(sink), 0) > 0) {
    }
  });
  const std::size_t before = proc_status_kib(::getpid(), "VmRSS");
  std::string what = "no exception";
  {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = listener.port();
    o.timeout = 10s;
    TcpStore victim(o);
    try {
      victim.ping();
    } catch (const StoreError& e) {
      what = std::string("StoreError: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other exception: ") + e.what();
    }
  }
  fake.join();  // the fake server's read ends when the victim closed its connection
  INFO(what);
  REQUIRE_THAT(what, Catch::StartsWith("StoreError") &&
                         Catch::Contains("announced a reply of 2000000000 bytes"));
  REQUIRE(proc_status_kib(::getpid(), "VmRSS") < before + 64 * 1024);
}
