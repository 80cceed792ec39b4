// SPDX-License-Identifier: BSD-3-Clause
// TcpStore specifics and server robustness, with the server in this process: connect failure
// and address-in-use messages, limits, wait_for_clients, 2,000 concurrent connections, and
// 10,000+ malformed frames while a well-behaved client keeps getting correct answers.
#include <catch2/catch.hpp>

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "core/bytes.hpp"
#include "net/connect.hpp"
#include "net/event_loop.hpp"
#include "net/frame.hpp"
#include "net/listener.hpp"
#include "store/protocol.hpp"
#include "store/store_test_util.hpp"
#include "support/held_port.hpp"

using namespace std::chrono_literals;
using namespace chorus;

namespace {

TcpStoreOptions client_options(std::uint16_t port, Duration timeout = 10s) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = timeout;
  return o;
}

// Waits (bounded) until the server reports `n` clients.
bool await_clients(const TcpStoreServer& server, std::size_t n, Duration bound) {
  const Deadline d = Deadline::after(bound);
  while (!d.expired()) {
    if (server.num_clients() == n) {
      return true;
    }
    std::this_thread::sleep_for(5ms);  // polling an observable condition, not synchronizing
  }
  return server.num_clients() == n;
}

}  // namespace

TEST_CASE("net: event loop dispatches accept, read and timers; post wakes it", "[net]") {
  net::EventLoop loop;
  auto listener = net::Listener::bind("127.0.0.1", 0);
  net::Socket server_side;
  std::string received;
  loop.add(listener.fd(), EPOLLIN, [&](std::uint32_t) {
    auto a = listener.accept();
    REQUIRE(a.io.ok());
    server_side = std::move(a.socket);
    loop.add(server_side.fd(), EPOLLIN, [&](std::uint32_t) {
      char buf[64];
      net::IoResult r = server_side.read(buf, sizeof(buf));
      if (r.ok()) {
        received.append(buf, r.bytes);
      } else if (r.closed()) {
        loop.remove(server_side.fd());  // removing inside its own callback is allowed
      }
    });
  });
  bool timer_fired = false;
  loop.add_timer(Deadline::after(20ms), [&] { timer_fired = true; });
  const auto cancelled =
      loop.add_timer(Deadline::after(10ms), [&] { FAIL("cancelled timer fired"); });
  REQUIRE(loop.cancel_timer(cancelled));
  net::Socket client = net::connect("127.0.0.1", listener.port(), Deadline::after(5s));
  REQUIRE(net::send_all(client, "ping", 4, Deadline::after(5s)).ok());
  client.close();
  const Deadline d = Deadline::after(10s);
  while ((received != "ping" || !timer_fired || loop.contains(server_side.fd())) && !d.expired()) {
    loop.run_once(d);
  }
  REQUIRE(received == "ping");
  REQUIRE(timer_fired);
  bool posted = false;
  std::thread other([&] { loop.post([&] { posted = true; }); });
  other.join();
  while (!posted && !d.expired()) {
    loop.run_once(d);
  }
  REQUIRE(posted);
}

TEST_CASE("net: poll_ready dispatches what is ready and the due timers without sleeping", "[net]") {
  net::EventLoop loop;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
  int reads = 0;
  loop.add(fds[0], EPOLLIN, [&](std::uint32_t) {
    char buf[8];
    while (::read(fds[0], buf, sizeof(buf)) > 0) {
    }
    ++reads;
  });
  // Nothing ready, no timer: it returns (a sleeping call would hang this test).
  REQUIRE(loop.poll_ready() == 0);
  REQUIRE(::write(fds[1], "x", 1) == 1);
  REQUIRE(loop.poll_ready() == 1);
  REQUIRE(reads == 1);
  // With timers set: the due one fires, the far one does not, and nothing sleeps to it.
  bool due = false;
  bool far = false;
  loop.add_timer(Deadline::after(0ms), [&] { due = true; });
  const auto far_id = loop.add_timer(Deadline::after(1h), [&] { far = true; });
  REQUIRE(loop.poll_ready() == 0);
  REQUIRE(due);
  REQUIRE_FALSE(far);
  REQUIRE(loop.cancel_timer(far_id));
  // A post() wakes it: the function runs and the call counts the wake-up.
  bool posted = false;
  loop.post([&] { posted = true; });
  REQUIRE(loop.poll_ready() == 1);
  REQUIRE(posted);
  loop.remove(fds[0]);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("net: no wakeup() is lost, whether the loop is asleep, about to sleep or busy", "[net]") {
  net::EventLoop loop;
  // Made before run_once(): that call returns at once instead of sleeping to its deadline.
  loop.wakeup();
  REQUIRE(loop.run_once(Deadline::after(10s)) >= 1);
  // From another thread, at every point of run_once() (the waker yields a varying number of
  // times first): each round must end with the wakeup, never at the 10 s deadline (a lost
  // wakeup returns 0).
  constexpr int kRounds = 300;
  std::atomic<int> round{0};
  std::thread waker([&] {
    for (int r = 1; r <= kRounds; ++r) {
      while (round.load() < r) {
        std::this_thread::yield();
      }
      for (int i = 0; i < r % 7; ++i) {
        std::this_thread::yield();
      }
      loop.wakeup();
    }
  });
  int lost = 0;
  for (int r = 1; r <= kRounds; ++r) {
    round.store(r);
    if (loop.run_once(Deadline::after(10s)) == 0) {
      ++lost;
      break;
    }
  }
  waker.join();
  REQUIRE(lost == 0);
}

TEST_CASE("TcpStore: connect failure names host:port, time waited and the OS error", "[store]") {
  const test::HeldLoopbackPort held;
  const std::uint16_t port = held.port();
  const auto start = Clock::now();
  try {
    TcpStore store(client_options(port, 400ms));
    FAIL("connected to a port nobody listens on");
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    INFO(what);
    REQUIRE(what.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    REQUIRE(what.find("ECONNREFUSED") != std::string::npos);
    REQUIRE(e.context().peer_address == "127.0.0.1:" + std::to_string(port));
    REQUIRE(e.context().os_error == ECONNREFUSED);
  }
  REQUIRE(test::since(start) < 400ms + test::kSlack);
}

TEST_CASE("TcpStore: a client started before its server connects once the server is up",
          "[store]") {
  const test::HeldLoopbackPort held;
  const std::uint16_t port = held.port();
  std::atomic<bool> ok{false};
  std::string error;
  std::thread client([&] {
    try {
      TcpStore store(client_options(port, 20s));
      ok = store.get_string("k") == "v";
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  TcpStoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  TcpStoreServer server(so);
  {
    TcpStore setter(client_options(port));
    setter.set("k", std::string_view("v"));
  }
  client.join();
  INFO(error);
  REQUIRE(ok);
}

TEST_CASE("TcpStore: once its server is gone, a call fails at once instead of at the timeout",
          "[store]") {
  // A job's store host (rank 0) that exits first must not hold every other rank's group
  // cleanup for the whole store timeout.
  const test::HeldLoopbackPort held;
  const std::uint16_t port = held.port();
  auto server = std::make_unique<TcpStoreServer>([&] {
    TcpStoreServerOptions so;
    so.host = "127.0.0.1";
    so.port = port;
    return so;
  }());
  TcpStore store(client_options(port, 60s));
  store.set("k", std::string_view("v"));
  server.reset();
  const auto start = Clock::now();
  try {
    (void)store.delete_key("k");
    FAIL("a call to a stopped server succeeded");
  } catch (const NetworkError& e) {
    INFO(e.what());
    CHECK(e.context().os_error == ECONNREFUSED);
  }
  CHECK(test::since(start) < 10s);  // the timeout is 60 s
}

TEST_CASE("TcpStoreServer: address in use names the port and the way out", "[store]") {
  TcpStoreServer first({.host = "127.0.0.1", .port = 0});
  try {
    TcpStoreServer second({.host = "127.0.0.1", .port = first.port()});
    FAIL("two servers bound the same port");
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    INFO(what);
    REQUIRE(what.find(std::to_string(first.port())) != std::string::npos);
    REQUIRE(what.find("in use") != std::string::npos);
    REQUIRE(what.find("port 0") != std::string::npos);
  }
}

TEST_CASE("TcpStore: list_keys, ping, limits, wait_for_clients, dual-stack", "[store]") {
  TcpStoreOptions so = client_options(0);
  so.is_server = true;
  so.max_key_bytes = 64;
  so.max_value_bytes = 1024;
  TcpStore store(so);
  REQUIRE(store.port() != 0);
  store.set("b", std::string_view("1"));
  store.set("a", std::string_view("2"));
  REQUIRE(store.list_keys() == std::vector<std::string>{"a", "b"});
  REQUIRE(store.ping() < 10s);
  REQUIRE_THROWS_AS(store.set(std::string(65, 'k'), std::string_view("v")), InvalidArgument);
  REQUIRE_THROWS_AS(store.set("k", Bytes(1025, 0)), InvalidArgument);
  // The connection is still fine after refused calls.
  REQUIRE(store.get_string("a") == "2");
  // append cannot grow a value past the limit either; nothing is appended then.
  store.append("grow", Bytes(600, 1));
  REQUIRE_THROWS_WITH(store.append("grow", Bytes(600, 2)), Catch::Contains("max_value_bytes"));
  REQUIRE(store.get("grow") == Bytes(600, 1));
  store.append("grow", Bytes(424, 3));
  REQUIRE(store.get("grow").size() == 1024);

  // wait_for_clients: the embedded server's own client counted 1; two more join.
  std::thread joiner([&] {
    TcpStoreOptions o = client_options(store.port());
    o.wait_for_clients = 3;
    TcpStore c(o);
  });
  TcpStoreOptions o = client_options(store.port());
  o.wait_for_clients = 3;
  TcpStore c(o);
  joiner.join();
  TcpStoreOptions too_many = client_options(store.port(), 300ms);
  too_many.wait_for_clients = 100;
  REQUIRE_THROWS_AS(TcpStore(too_many), TimeoutError);

  TcpStoreOptions v6;
  v6.host = "::";
  v6.port = 0;
  v6.is_server = true;
  v6.timeout = 10s;
  TcpStore dual(v6);
  dual.set("x", std::string_view("y"));
  TcpStore via_v4(client_options(dual.port()));
  REQUIRE(via_v4.get_string("x") == "y");
}

TEST_CASE("TcpStore: source_address binds the client's socket before connecting", "[store]") {
  // A listener stands in for the server: it sees where the connection comes from.
  auto listener = net::Listener::bind("127.0.0.1", 0);
  TcpStoreOptions o = client_options(listener.port(), 2s);
  o.source_address = "127.0.0.9";
  o.token = "";
  std::thread client([&] {
    try {
      TcpStore c(o);  // no hello ever comes back: times out
    } catch (const Error&) {
    }
  });
  net::AcceptResult a;
  const Deadline d = Deadline::after(5s);
  while (!d.expired()) {
    a = listener.accept();
    if (a.io.ok()) {
      break;
    }
    std::this_thread::sleep_for(5ms);  // polling a non-blocking accept, bounded
  }
  REQUIRE(a.io.ok());
  REQUIRE(a.peer.host() == "127.0.0.9");
  a.socket.close();
  client.join();

  // With a real server: calls go through; a name is refused before anything is sent.
  TcpStoreOptions so = client_options(0);
  so.is_server = true;
  TcpStore server(so);
  TcpStoreOptions co = client_options(server.port());
  co.source_address = "127.0.0.10";
  TcpStore c(co);
  c.set("k", std::string_view("v"));
  REQUIRE(c.get_string("k") == "v");
  co.source_address = "localhost";
  REQUIRE_THROWS_WITH(TcpStore(co), Catch::Contains("source_address"));
}

TEST_CASE("TcpStore: large values up to the limit go through", "[store]") {
  TcpStoreOptions so = client_options(0);
  so.is_server = true;
  TcpStore store(so);
  Bytes big(8 * 1024 * 1024);
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<std::uint8_t>(i * 31);
  }
  store.set("big", big);
  REQUIRE(store.get("big") == big);
  REQUIRE_THROWS_AS(store.set("too-big", Bytes(big.size() + 1)), InvalidArgument);
}

TEST_CASE("TcpStoreServer: 2,000 concurrent connections", "[store][slow]") {
  TcpStoreServer server({.host = "127.0.0.1", .port = 0});
  std::vector<std::unique_ptr<TcpStore>> clients;
  clients.reserve(2000);
  for (int i = 0; i < 2000; ++i) {
    clients.push_back(std::make_unique<TcpStore>(client_options(server.port())));
  }
  REQUIRE(await_clients(server, 2000, 10s));
  for (auto& c : clients) {
    c->add("count", 1);
  }
  REQUIRE(clients.front()->add("count", 0) == 2000);
  // Every connection is answered in turn by a parked watch.
  std::thread setter([&] { clients.back()->set("go", std::string_view("1")); });
  for (std::size_t i = 0; i < clients.size(); i += 97) {
    REQUIRE(clients[i]->get_string("go", 10s) == "1");
  }
  setter.join();
  clients.clear();
  REQUIRE(await_clients(server, 0, 10s));
}

namespace {

// One connection that misbehaves in the given way, then goes away. Returns the number of
// malformed frames it sent (1).
int misbehave(std::uint16_t port, int kind, std::mt19937& rng) {
  net::Socket s = net::connect("127.0.0.1", port, Deadline::after(10s));
  std::vector<std::uint8_t> out;
  std::uint8_t hello[store::kHelloBytes];
  store::encode_hello({store::kProtocolVersion, 0}, hello);
  auto with_hello = [&] { out.insert(out.end(), hello, hello + store::kHelloBytes); };
  switch (kind) {
    case 0:  // wrong magic
      out = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'};
      break;
    case 1: {  // oversized length
      with_hello();
      const std::uint8_t len[4] = {0xff, 0xff, 0xff, 0x7f};
      out.insert(out.end(), len, len + 4);
      break;
    }
    case 2: {  // truncated frame, then vanish mid-frame
      with_hello();
      const std::uint8_t partial[6] = {100, 0, 0, 0, 1, 0};
      out.insert(out.end(), partial, partial + 6);
      break;
    }
    case 3: {  // unknown op
      with_hello();
      const std::uint8_t frame[9] = {5, 0, 0, 0, 0xee, 1, 0, 0, 0};
      out.insert(out.end(), frame, frame + 9);
      break;
    }
    case 4: {  // random bytes after a valid hello, framed with a plausible length
      with_hello();
      std::vector<std::uint8_t> junk(8 + rng() % 40);
      for (auto& b : junk) {
        b = static_cast<std::uint8_t>(rng());
      }
      junk[0] = static_cast<std::uint8_t>(junk.size() - 4);
      junk[1] = junk[2] = junk[3] = 0;
      junk[4] = static_cast<std::uint8_t>(15 + rng() % 200);  // never a valid op
      out.insert(out.end(), junk.begin(), junk.end());
      break;
    }
    case 5: {  // random bytes from the first byte
      out.resize(1 + rng() % 64);
      for (auto& b : out) {
        b = static_cast<std::uint8_t>(rng());
      }
      out[0] = 'Z';  // never the magic
      break;
    }
    case 6: {  // a field that overruns its frame (key length larger than the frame)
      with_hello();
      const std::uint8_t frame[13] = {9, 0, 0, 0, 1, 1, 0, 0, 0, 0xff, 0xff, 0, 0};
      out.insert(out.end(), frame, frame + 13);
      break;
    }
    default: {  // vanish in the middle of the handshake
      out = {'C', 'H', 'S'};
      break;
    }
  }
  (void)net::send_all(s, out.data(), out.size(), Deadline::after(10s));
  return 1;
}

}  // namespace

TEST_CASE("TcpStoreServer: 10,000+ malformed frames while a good client gets correct answers",
          "[store][slow]") {
  TcpStoreServer server({.host = "127.0.0.1", .port = 0});
  std::atomic<bool> stop{false};
  std::atomic<long> good_ops{0};
  std::string good_error;
  std::thread good([&] {
    try {
      TcpStore store(client_options(server.port()));
      long i = 0;
      while (!stop.load()) {
        const std::string key = "good/" + std::to_string(i % 50);
        const std::string value = "v" + std::to_string(i);
        store.set(key, std::string_view(value));
        if (store.get_string(key) != value) {
          good_error = "get returned a wrong value for " + key;
          return;
        }
        if (store.add("good/counter", 1) != i + 1) {
          good_error = "add returned a wrong count";
          return;
        }
        ++i;
        good_ops = i;
      }
    } catch (const std::exception& e) {
      good_error = e.what();
    }
  });
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2600;
  std::atomic<int> sent{0};
  std::vector<std::thread> attackers;
  for (int t = 0; t < kThreads; ++t) {
    attackers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t * 7919 + 1));
      for (int i = 0; i < kPerThread; ++i) {
        sent += misbehave(server.port(), (i + t) % 8, rng);
      }
    });
  }
  for (auto& a : attackers) {
    a.join();
  }
  // Let the good client make progress after the storm, then stop it.
  const long before = good_ops.load();
  const Deadline d = Deadline::after(10s);
  while (good_ops.load() < before + 20 && good_error.empty() && !d.expired()) {
    std::this_thread::sleep_for(1ms);
  }
  stop = true;
  good.join();
  INFO(good_error);
  REQUIRE(good_error.empty());
  REQUIRE(sent.load() >= 10000);
  REQUIRE(good_ops.load() >= before + 20);
  // Every misbehaving connection was closed: none leaks.
  REQUIRE(await_clients(server, 0, 10s));
  // The server still serves.
  TcpStore after(client_options(server.port()));
  REQUIRE(after.add("good/counter", 0) == good_ops.load());
}

namespace {

// A raw protocol client: requests with chosen ids, replies read one frame at a time, so that a
// test sees exactly what the server sent and in which order. Throws on any failure (it also
// runs on load threads, where Catch's REQUIRE must not be used).
struct RawClient {
  net::Socket socket;
  std::map<std::uint32_t, store::Op> ops;  // request id -> op, for decoding its reply

  static void check(bool ok, const std::string& what) {
    if (!ok) {
      throw std::runtime_error("raw client: " + what);
    }
  }
  explicit RawClient(std::uint16_t port) {
    socket = net::connect("127.0.0.1", port, Deadline::after(10s));
    std::uint8_t hello[store::kHelloBytes];
    store::encode_hello({store::kProtocolVersion, 0}, hello);
    check(net::send_all(socket, hello, sizeof(hello), Deadline::after(10s)).ok(), "send hello");
    check(net::recv_exact(socket, hello, sizeof(hello), Deadline::after(10s)).ok(), "hello answer");
    const auto answer = store::decode_hello(hello);
    check(answer && answer->flags == static_cast<std::uint16_t>(store::HelloStatus::accepted),
          "hello refused");
  }
  void send(const std::vector<store::Request>& batch) {
    std::vector<std::uint8_t> buf;
    for (const auto& q : batch) {
      ops[q.id] = q.op;
      store::encode_request(q, buf);
    }
    check(net::send_all(socket, buf.data(), buf.size(), Deadline::after(10s)).ok(), "send");
  }
  // The next reply (bounded wait); its request id must be one still unanswered.
  store::Reply next() {
    std::uint8_t header[4];
    check(net::recv_exact(socket, header, 4, Deadline::after(20s)).ok(), "no reply in 20 s");
    std::vector<std::uint8_t> payload(net::get_u32(header));
    check(payload.size() >= 5, "short reply");
    check(net::recv_exact(socket, payload.data(), payload.size(), Deadline::after(20s)).ok(),
          "truncated reply");
    const std::uint32_t id = net::get_u32(payload.data() + 1);
    auto op = ops.find(id);
    check(op != ops.end(),
          "reply to an unknown or already answered request id " + std::to_string(id));
    store::Reply r;
    store::DecodeError err;
    check(store::decode_reply(op->second, payload, r, err), "bad reply: " + err.message);
    ops.erase(op);
    return r;
  }
};

store::Request make_request(store::Op op, std::uint32_t id, std::vector<std::string> keys,
                            std::uint64_t timeout_ms = 0) {
  store::Request q;
  q.op = op;
  q.id = id;
  q.keys = std::move(keys);
  q.timeout_ms = timeout_ms;
  return q;
}

}  // namespace

TEST_CASE(
    "TcpStoreServer: parked get/wait/multi_get are answered exactly once, never early, "
    "while pipelined set/get/add load runs",
    "[store]") {
  TcpStoreServer server({.host = "127.0.0.1", .port = 0});
  constexpr int kKeys = 48;
  constexpr int kWaiters = 6;
  auto key = [](int k) { return "w/" + std::to_string(k % kKeys); };
  auto value = [](int k) { return "value-" + std::to_string(k % kKeys); };

  // Load: pipelined batches of set/get/add on other keys; every reply checked, add exact.
  std::atomic<bool> stop{false};
  std::atomic<long> load_ops{0};
  std::vector<std::string> load_errors(3);
  std::vector<std::thread> load;
  for (int t = 0; t < 3; ++t) {
    load.emplace_back([&, t] {
      try {
        RawClient c(server.port());
        const std::string counter = "load/counter/" + std::to_string(t);
        std::int64_t expected = 0;
        for (std::uint32_t round = 0; !stop.load(); ++round) {
          std::vector<store::Request> batch;
          for (std::uint32_t i = 0; i < 16; ++i) {
            const std::uint32_t id = round * 16 + i;
            const std::string k = "load/" + std::to_string(t) + "/" + std::to_string(i);
            if (i % 3 == 0) {
              auto q = make_request(store::Op::set, id, {k});
              q.values = {to_bytes(std::to_string(round))};
              batch.push_back(q);
            } else if (i % 3 == 1) {  // the key set just before in this batch
              const std::string prev = "load/" + std::to_string(t) + "/" + std::to_string(i - 1);
              batch.push_back(make_request(store::Op::get, id, {prev}, 60000));
            } else {
              auto q = make_request(store::Op::add, id, {counter});
              q.delta = 1;
              batch.push_back(q);
            }
          }
          c.send(batch);
          for (std::size_t i = 0; i < batch.size(); ++i) {
            const store::Reply r = c.next();
            if (r.status != store::ReplyStatus::ok) {
              throw std::runtime_error("load request failed: " + r.message);
            }
            if (r.id % 16 % 3 == 2 && r.integer != ++expected) {
              throw std::runtime_error("add returned " + std::to_string(r.integer) + ", expected " +
                                       std::to_string(expected));
            }
          }
          load_ops += 16;
        }
      } catch (const std::exception& e) {
        load_errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }

  // Waiters: every connection parks a get on every key, and (spread over the connections) a
  // wait on two keys and a multi_get of two keys. want[c][id] = the keys that request needs.
  std::vector<std::unique_ptr<RawClient>> waiters;
  std::vector<std::map<std::uint32_t, std::vector<int>>> want(kWaiters);
  for (int c = 0; c < kWaiters; ++c) {
    waiters.push_back(std::make_unique<RawClient>(server.port()));
    std::vector<store::Request> batch;
    std::uint32_t id = 1;
    for (int k = 0; k < kKeys; ++k) {
      batch.push_back(make_request(store::Op::get, id, {key(k)}, 120000));
      want[c][id++] = {k};
      if (k % kWaiters == c) {
        batch.push_back(make_request(store::Op::wait, id, {key(k), key(k + 1)}, 120000));
        want[c][id++] = {k, k + 1};
        batch.push_back(
            make_request(store::Op::multi_get, id, {key(k + kKeys / 2), key(k)}, 120000));
        want[c][id++] = {k + kKeys / 2, k};
      }
    }
    waiters.back()->send(batch);
  }
  RawClient setter(server.port());
  std::uint32_t next_id = 1u << 30;
  std::vector<bool> is_set(kKeys, false);
  for (int k = 0; k < kKeys; ++k) {
    // Nothing answered early: a ping sent now is answered before anything else.
    for (int c = 0; c < kWaiters; ++c) {
      const std::uint32_t ping = next_id++;
      waiters[static_cast<std::size_t>(c)]->send({make_request(store::Op::ping, ping, {})});
      REQUIRE(waiters[static_cast<std::size_t>(c)]->next().id == ping);
    }
    auto q = make_request(store::Op::set, next_id++, {key(k)});
    q.values = {to_bytes(value(k))};
    setter.send({q});
    REQUIRE(setter.next().status == store::ReplyStatus::ok);
    is_set[static_cast<std::size_t>(k)] = true;
    // Exactly the requests whose keys now all exist are answered, each once, with the values.
    for (int c = 0; c < kWaiters; ++c) {
      std::map<std::uint32_t, std::vector<int>> due;
      for (auto it = want[c].begin(); it != want[c].end();) {
        const bool ready = std::all_of(it->second.begin(), it->second.end(), [&](int kk) {
          return is_set[static_cast<std::size_t>(kk % kKeys)];
        });
        if (ready) {
          due.insert(*it);
          it = want[c].erase(it);
        } else {
          ++it;
        }
      }
      for (std::size_t n = due.size(); n > 0; --n) {
        const store::Reply r = waiters[static_cast<std::size_t>(c)]->next();
        auto d = due.find(r.id);
        INFO("connection " << c << " key " << k << " reply id " << r.id);
        REQUIRE(d != due.end());
        REQUIRE(r.status == store::ReplyStatus::ok);
        const std::vector<int>& keys = d->second;
        const store::Op op = keys.size() == 1         ? store::Op::get
                             : keys[0] == keys[1] - 1 ? store::Op::wait
                                                      : store::Op::multi_get;
        if (op == store::Op::wait) {
          REQUIRE(r.values.empty());
        } else {
          REQUIRE(r.values.size() == keys.size());
          for (std::size_t i = 0; i < keys.size(); ++i) {
            REQUIRE(r.values[i] == to_bytes(value(keys[i])));
          }
        }
        due.erase(d);
      }
    }
  }
  // Every request was answered, and nothing more follows.
  for (int c = 0; c < kWaiters; ++c) {
    REQUIRE(want[c].empty());
    const std::uint32_t ping = next_id++;
    waiters[static_cast<std::size_t>(c)]->send({make_request(store::Op::ping, ping, {})});
    REQUIRE(waiters[static_cast<std::size_t>(c)]->next().id == ping);
  }
  stop = true;
  for (auto& t : load) {
    t.join();
  }
  for (const auto& e : load_errors) {
    INFO(e);
    REQUIRE(e.empty());
  }
  REQUIRE(load_ops.load() > 0);
}
