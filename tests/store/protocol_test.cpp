// SPDX-License-Identifier: BSD-3-Clause
// Pure units of the store and net layers: protocol encode/decode (round trips, truncation,
// limits, fuzz), KvTable watches, FrameReader partial reads, host:port parsing.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include <random>
#include <vector>

#include <chorus/errors.hpp>

#include "net/address.hpp"
#include "net/frame.hpp"
#include "store/kv_table.hpp"
#include "store/protocol.hpp"

using namespace chorus;
using namespace chorus::store;

namespace {

std::span<const std::uint8_t> payload_of(const std::vector<std::uint8_t>& frame) {
  REQUIRE(frame.size() >= 4);
  REQUIRE(net::get_u32(frame.data()) == frame.size() - 4);
  return std::span<const std::uint8_t>(frame.data() + 4, frame.size() - 4);
}

Request round_trip(const Request& q, const Limits& limits = {}) {
  std::vector<std::uint8_t> buf;
  encode_request(q, buf);
  Request out;
  DecodeError err;
  INFO(err.message);
  REQUIRE(decode_request(payload_of(buf), limits, out, err));
  return out;
}

}  // namespace

TEST_CASE("protocol: hello round trip and wrong magic", "[store][protocol]") {
  std::uint8_t raw[kHelloBytes];
  encode_hello({kProtocolVersion, kHelloFlagMember}, raw);
  auto h = decode_hello(raw);
  REQUIRE(h);
  REQUIRE(h->version == kProtocolVersion);
  REQUIRE(h->flags == kHelloFlagMember);
  raw[0] = 'X';
  REQUIRE_FALSE(decode_hello(raw));
}

TEST_CASE("protocol: every request op round-trips", "[store][protocol]") {
  Request q;
  q.id = 77;
  SECTION("set") {
    q.op = Op::set;
    q.keys = {"k"};
    q.values = {to_bytes("v")};
    auto r = round_trip(q);
    REQUIRE(r.op == Op::set);
    REQUIRE(r.id == 77);
    REQUIRE(r.keys == q.keys);
    REQUIRE(r.values == q.values);
  }
  SECTION("get with timeout") {
    q.op = Op::get;
    q.keys = {"k"};
    q.timeout_ms = 123456789012ull;
    auto r = round_trip(q);
    REQUIRE(r.timeout_ms == q.timeout_ms);
  }
  SECTION("add negative") {
    q.op = Op::add;
    q.keys = {"c"};
    q.delta = -42;
    REQUIRE(round_trip(q).delta == -42);
  }
  SECTION("compare_set") {
    q.op = Op::compare_set;
    q.keys = {"k"};
    q.values = {Bytes{}, to_bytes("new")};
    REQUIRE(round_trip(q).values == q.values);
  }
  SECTION("multi ops") {
    for (Op op : {Op::wait, Op::multi_get, Op::get_with, Op::check}) {
      q.op = op;
      q.keys = {"a", "", "c"};
      REQUIRE(round_trip(q).keys == q.keys);
    }
    q.op = Op::multi_set;
    q.keys = {"a", "b"};
    q.values = {to_bytes("1"), Bytes{}};
    auto r = round_trip(q);
    REQUIRE(r.keys == q.keys);
    REQUIRE(r.values == q.values);
  }
  SECTION("no-argument ops and wait_clients") {
    for (Op op : {Op::num_keys, Op::list_keys, Op::ping, Op::delete_key, Op::append}) {
      q.op = op;
      q.keys = {"k"};
      q.values = {to_bytes("x")};
      REQUIRE(round_trip(q).op == op);
    }
    q.op = Op::wait_clients;
    q.count = 4096;
    REQUIRE(round_trip(q).count == 4096);
  }
}

TEST_CASE("protocol: replies round-trip, including timeout and error", "[store][protocol]") {
  Reply p;
  p.id = 9;
  p.values = {to_bytes("x"), Bytes{}};
  std::vector<std::uint8_t> buf;
  encode_reply(Op::multi_get, p, buf);
  Reply out;
  DecodeError err;
  REQUIRE(decode_reply(Op::multi_get, payload_of(buf), out, err));
  REQUIRE(out.values == p.values);

  // get_with: each value with whether it exists (an absent one travels as empty).
  p.present = {true, false};
  buf.clear();
  encode_reply(Op::get_with, p, buf);
  Reply with;
  REQUIRE(decode_reply(Op::get_with, payload_of(buf), with, err));
  REQUIRE(with.values == p.values);
  REQUIRE(with.present == p.present);

  Reply t;
  t.status = ReplyStatus::timeout;
  t.keys = {"missing"};
  buf.clear();
  encode_reply(Op::get, t, buf);
  Reply tout;
  REQUIRE(decode_reply(Op::get, payload_of(buf), tout, err));
  REQUIRE(tout.status == ReplyStatus::timeout);
  REQUIRE(tout.keys == t.keys);

  Reply e;
  e.status = ReplyStatus::error;
  e.error = ErrorKind::not_integer;
  e.message = "nope";
  buf.clear();
  encode_reply(Op::add, e, buf);
  Reply eout;
  REQUIRE(decode_reply(Op::add, payload_of(buf), eout, err));
  REQUIRE(eout.error == ErrorKind::not_integer);
  REQUIRE(eout.message == "nope");
}

TEST_CASE("protocol: malformed requests are rejected with a reason", "[store][protocol]") {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 64;
  Request q;
  q.op = Op::set;
  q.keys = {"k"};
  q.values = {to_bytes("value")};
  std::vector<std::uint8_t> buf;
  encode_request(q, buf);
  auto payload = payload_of(buf);
  Request out;
  DecodeError err;

  SECTION("every truncation fails") {
    for (std::size_t n = 0; n < payload.size(); ++n) {
      Request r;
      DecodeError e;
      REQUIRE_FALSE(decode_request(payload.first(n), limits, r, e));
      REQUIRE_FALSE(e.message.empty());
    }
  }
  SECTION("get_with without a key to wait for") {
    Request none;
    none.op = Op::get_with;
    std::vector<std::uint8_t> empty;
    encode_request(none, empty);
    REQUIRE_FALSE(decode_request(payload_of(empty), limits, out, err));
    REQUIRE(err.message.find("no key") != std::string::npos);
  }
  SECTION("trailing bytes fail") {
    std::vector<std::uint8_t> longer(payload.begin(), payload.end());
    longer.push_back(0);
    REQUIRE_FALSE(decode_request(longer, limits, out, err));
  }
  SECTION("unknown op") {
    std::vector<std::uint8_t> bad(payload.begin(), payload.end());
    bad[0] = 200;
    REQUIRE_FALSE(decode_request(bad, limits, out, err));
    REQUIRE(err.kind == ErrorKind::unsupported);
  }
  SECTION("key over the limit") {
    q.keys = {std::string(17, 'k')};
    buf.clear();
    encode_request(q, buf);
    REQUIRE_FALSE(decode_request(payload_of(buf), limits, out, err));
    REQUIRE(err.kind == ErrorKind::too_large);
    REQUIRE(err.message.find("17") != std::string::npos);
  }
  SECTION("value over the limit") {
    q.values = {Bytes(65, 1)};
    buf.clear();
    encode_request(q, buf);
    REQUIRE_FALSE(decode_request(payload_of(buf), limits, out, err));
    REQUIRE(err.kind == ErrorKind::too_large);
  }
  SECTION("a huge item count does not allocate") {
    std::vector<std::uint8_t> bad = {
        static_cast<std::uint8_t>(Op::check), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    REQUIRE_FALSE(decode_request(bad, limits, out, err));
  }
}

TEST_CASE("protocol: random payloads never crash the decoder", "[store][protocol]") {
  std::mt19937 rng(12345);
  Limits limits;
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> junk(rng() % 64);
    for (auto& b : junk) {
      b = static_cast<std::uint8_t>(rng());
    }
    if (!junk.empty() && i % 2 == 0) {
      junk[0] = static_cast<std::uint8_t>(1 + rng() % 14);  // valid op, random body
    }
    Request q;
    DecodeError err;
    accepted += decode_request(junk, limits, q, err) ? 1 : 0;
    Reply p;
    (void)decode_reply(static_cast<Op>(1 + rng() % 14), junk, p, err);
  }
  // Some random frames are valid (ping with an id); most are not. Either way: no crash.
  REQUIRE(accepted < 20000);
}

TEST_CASE("FrameReader reassembles frames split at every byte", "[net]") {
  std::vector<std::uint8_t> stream;
  for (int i = 0; i < 5; ++i) {
    std::vector<std::uint8_t> payload(static_cast<std::size_t>(i * 7),
                                      static_cast<std::uint8_t>(i));
    auto f = net::frame_bytes(payload);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  for (std::size_t chunk = 1; chunk <= 9; ++chunk) {
    net::FrameReader reader(1024);
    int frames = 0;
    for (std::size_t at = 0; at < stream.size(); at += chunk) {
      reader.feed(
          std::span<const std::uint8_t>(stream.data() + at, std::min(chunk, stream.size() - at)));
      std::span<const std::uint8_t> p;
      while (reader.next(p) == net::FrameReader::Status::frame) {
        REQUIRE(p.size() == static_cast<std::size_t>(frames * 7));
        for (auto b : p) {
          REQUIRE(b == frames);
        }
        ++frames;
      }
    }
    REQUIRE(frames == 5);
    REQUIRE_FALSE(reader.mid_frame());
  }
  net::FrameReader small(8);
  const std::uint8_t header[4] = {9, 0, 0, 0};
  small.feed(header);
  std::span<const std::uint8_t> p;
  REQUIRE(small.next(p) == net::FrameReader::Status::too_large);
  REQUIRE(small.announced() == 9);
}

TEST_CASE("KvTable: watches fire when every key exists, survive deletes, and can be removed",
          "[store]") {
  KvTable t;
  REQUIRE(t.add_watch({}) == 0);
  const auto w = t.add_watch({"a", "b", "a"});
  REQUIRE(w != 0);
  t.set("a", to_bytes("1"));
  REQUIRE(t.take_ready().empty());
  t.erase("a");
  t.set("b", to_bytes("2"));
  REQUIRE(t.take_ready().empty());  // "a" was deleted again: still waiting
  t.set("a", to_bytes("3"));
  auto ready = t.take_ready();
  REQUIRE(ready == std::vector<KvTable::WatchId>{w});
  REQUIRE(t.num_watches() == 0);

  const auto w2 = t.add_watch({"x"});
  REQUIRE(t.remove_watch(w2));
  REQUIRE_FALSE(t.remove_watch(w2));
  t.set("x", {});
  REQUIRE(t.take_ready().empty());

  REQUIRE(t.add("n", 5).value == 5);
  t.set("s", to_bytes("abc"));
  REQUIRE(t.add("s", 1).status == KvTable::AddResult::Status::not_integer);
  REQUIRE(t.compare_set("cs", {}, to_bytes("v")) == to_bytes("v"));
  REQUIRE(t.keys() == std::vector<std::string>{"a", "b", "cs", "n", "s", "x"});
  REQUIRE(t.key_bytes() == 1 + 1 + 2 + 1 + 1 + 1);
  // The sorted key cache follows creations and deletions.
  REQUIRE(t.erase("cs"));
  t.set("c", {});
  REQUIRE(t.keys() == std::vector<std::string>{"a", "b", "c", "n", "s", "x"});
  REQUIRE(t.key_bytes() == 6);
}

TEST_CASE("KvTable: add refuses to overflow int64 and leaves the counter unchanged", "[store]") {
  KvTable t;
  const auto max = std::numeric_limits<std::int64_t>::max();
  const auto min = std::numeric_limits<std::int64_t>::min();
  REQUIRE(t.add("c", max - 1).value == max - 1);
  REQUIRE(t.add("c", 1).value == max);
  const auto r = t.add("c", 1);
  REQUIRE(r.status == KvTable::AddResult::Status::overflow);
  REQUIRE(r.value == max);
  REQUIRE(*t.find("c") == to_bytes(std::to_string(max)));
  REQUIRE(t.add("d", min).value == min);
  REQUIRE(t.add("d", -1).status == KvTable::AddResult::Status::overflow);
  REQUIRE(checked_counter_add(max, min).value() == -1);
  REQUIRE_FALSE(checked_counter_add(min, min));
  REQUIRE_THAT(counter_overflow_message("c", max, 1),
               Catch::Contains("int64") && Catch::Contains("unchanged"));
}

TEST_CASE("FrameReader: memory follows received bytes, never the announced length", "[net]") {
  net::FrameReader r(16u << 20);
  std::uint8_t header[4];
  net::put_u32(header, 9u << 20);  // announces 9 MiB
  r.feed(header);
  std::span<const std::uint8_t> payload;
  REQUIRE(r.next(payload) == net::FrameReader::Status::need_more);
  REQUIRE(r.footprint() < (128u << 10));
  std::vector<std::uint8_t> chunk(1000, 7);
  r.feed(chunk);
  REQUIRE(r.footprint() < (128u << 10));
  REQUIRE_FALSE(r.frame_ready());
  // peek leaves the frame buffered until pop.
  net::FrameReader small(100);
  net::put_u32(header, 3);
  small.feed(header);
  const std::uint8_t body[3] = {1, 2, 3};
  small.feed(body);
  REQUIRE(small.frame_ready());
  REQUIRE(small.peek(payload) == net::FrameReader::Status::frame);
  REQUIRE(small.peek(payload) == net::FrameReader::Status::frame);
  small.pop();
  REQUIRE(small.peek(payload) == net::FrameReader::Status::need_more);
  REQUIRE_FALSE(small.mid_frame());
  // A header over the limit is reported as soon as the header is in.
  net::put_u32(header, 101);
  small.feed(header);
  REQUIRE(small.frame_ready());
  REQUIRE(small.next(payload) == net::FrameReader::Status::too_large);
}

TEST_CASE("host:port parsing and formatting", "[net]") {
  auto hp = net::parse_host_port("127.0.0.1:29500");
  REQUIRE(hp.host == "127.0.0.1");
  REQUIRE(hp.port == 29500);
  hp = net::parse_host_port("[::1]:0");
  REQUIRE(hp.host == "::1");
  REQUIRE(hp.port == 0);
  REQUIRE(net::parse_host_port("node-7.cluster:80").host == "node-7.cluster");
  REQUIRE_THROWS_AS(net::parse_host_port("::1:80"), InvalidArgument);
  REQUIRE_THROWS_AS(net::parse_host_port("host"), InvalidArgument);
  REQUIRE_THROWS_AS(net::parse_host_port("host:99999"), InvalidArgument);
  REQUIRE_THROWS_AS(net::parse_host_port("[::1]80"), InvalidArgument);
  REQUIRE(net::format_host_port("::1", 5) == "[::1]:5");
  auto a = net::SocketAddress::parse_numeric("::1", 7);
  REQUIRE(a);
  REQUIRE(a->to_string() == "[::1]:7");
  REQUIRE(a->is_loopback());
  REQUIRE_FALSE(net::SocketAddress::parse_numeric("not-a-literal", 1));
  // Name resolution itself: the one place in the suite that needs the name "localhost" (an
  // /etc/hosts line such as "127.0.0.1 localhost"; a bare root may have none).
  std::vector<net::SocketAddress> r;
  try {
    r = net::resolve("localhost", 9, Deadline::after(std::chrono::seconds(10)));
  } catch (const Error& e) {
    FAIL(
        "this test resolves the name \"localhost\", which does not resolve on this machine "
        "(add \"127.0.0.1 localhost\" to /etc/hosts): "
        << e.what());
  }
  REQUIRE_FALSE(r.empty());
  REQUIRE(r.front().is_loopback());
}

TEST_CASE("KvTable: stored_bytes follows every mutation; growth_if_set predicts it",
          "[store][protocol]") {
  using store::KvTable;
  KvTable t;
  const std::size_t entry = KvTable::kEntryOverhead;
  REQUIRE(t.stored_bytes() == 0);
  REQUIRE(t.growth_if_set("k", 10) == 1 + 10 + entry);
  t.set("k", Bytes(10, 1));
  REQUIRE(t.stored_bytes() == 1 + 10 + entry);
  REQUIRE(t.growth_if_set("k", 4) == 0);  // shrinking grows nothing
  t.set("k", Bytes(4, 1));
  REQUIRE(t.stored_bytes() == 1 + 4 + entry);
  t.append("k", Bytes(6, 2));
  REQUIRE(t.stored_bytes() == 1 + 10 + entry);
  t.compare_set("k", t.find("k") ? *t.find("k") : Bytes{}, Bytes(2, 3));
  REQUIRE(t.stored_bytes() == 1 + 2 + entry);
  REQUIRE(t.add("n", 12345).status == KvTable::AddResult::Status::ok);
  REQUIRE(t.stored_bytes() == (1 + 2 + entry) + (1 + 5 + entry));
  REQUIRE(t.erase("k"));
  REQUIRE(t.erase("n"));
  REQUIRE(t.stored_bytes() == 0);
}

TEST_CASE(
    "protocol: decode_simple_request accepts exactly what decode_request accepts for "
    "set/get/add, as views",
    "[store][protocol]") {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  auto agree = [&](std::span<const std::uint8_t> payload) {
    Request q;
    DecodeError err;
    const bool general = decode_request(payload, limits, q, err);
    SimpleRequest s;
    const bool simple = decode_simple_request(payload, limits, s);
    const bool hot = general && (q.op == Op::set || q.op == Op::get || q.op == Op::add);
    REQUIRE(simple == hot);
    if (simple) {
      REQUIRE(s.op == q.op);
      REQUIRE(s.id == q.id);
      REQUIRE(std::string(s.key) == q.keys.at(0));
      if (q.op == Op::set) {
        REQUIRE(Bytes(s.value.begin(), s.value.end()) == q.values.at(0));
      } else if (q.op == Op::get) {
        REQUIRE(s.timeout_ms == q.timeout_ms);
      } else {
        REQUIRE(s.delta == q.delta);
      }
    }
    return simple;
  };
  // Valid frames of each op, then every truncation, one trailing byte, and limits.
  std::vector<Request> valid(3);
  valid[0].op = Op::set;
  valid[0].keys = {"key"};
  valid[0].values = {to_bytes("value")};
  valid[1].op = Op::get;
  valid[1].keys = {"key"};
  valid[1].timeout_ms = 1234;
  valid[2].op = Op::add;
  valid[2].keys = {"counter"};
  valid[2].delta = -7;
  for (auto& q : valid) {
    q.id = 0xabcdef01;
    std::vector<std::uint8_t> frame;
    encode_request(q, frame);
    std::vector<std::uint8_t> payload(frame.begin() + 4, frame.end());
    REQUIRE(agree(payload));
    for (std::size_t n = 0; n < payload.size(); ++n) {
      REQUIRE_FALSE(agree(std::span<const std::uint8_t>(payload.data(), n)));
    }
    payload.push_back(0);
    REQUIRE_FALSE(agree(payload));
  }
  Request big = valid[0];
  big.keys = {std::string(17, 'k')};
  std::vector<std::uint8_t> frame;
  encode_request(big, frame);
  REQUIRE_FALSE(agree(std::span<const std::uint8_t>(frame).subspan(4)));
  big.keys = {std::string(16, 'k')};
  big.values = {Bytes(33, 1)};
  frame.clear();
  encode_request(big, frame);
  REQUIRE_FALSE(agree(std::span<const std::uint8_t>(frame).subspan(4)));
  big.values = {Bytes(32, 1)};
  frame.clear();
  encode_request(big, frame);
  REQUIRE(agree(std::span<const std::uint8_t>(frame).subspan(4)));
  // Random bodies behind the three opcodes.
  std::mt19937 rng(777);
  for (int i = 0; i < 30000; ++i) {
    std::vector<std::uint8_t> junk(5 + rng() % 40);
    for (auto& b : junk) {
      b = static_cast<std::uint8_t>(rng() % 4 == 0 ? rng() : rng() % 24);
    }
    junk[0] = static_cast<std::uint8_t>(1 + rng() % 3);
    agree(junk);
  }
}

TEST_CASE("OutputQueue: small writes share one buffer and leave in order through partial writes",
          "[net]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
  net::Socket a(fds[0]);
  net::Socket b(fds[1]);
  const int small = 4096;
  ::setsockopt(a.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  net::OutputQueue q;
  std::vector<std::uint8_t> expected;
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    const std::size_t n = rng() % 3 == 0 ? rng() % 9000 : rng() % 40;  // some over 512 bytes
    std::vector<std::uint8_t> bytes(n);
    for (auto& x : bytes) {
      x = static_cast<std::uint8_t>(rng());
    }
    expected.insert(expected.end(), bytes.begin(), bytes.end());
    if (i % 2 == 0) {
      q.push(bytes);
    } else if (n > 0) {
      std::memcpy(q.append(n), bytes.data(), n);
    }
    if (i % 7 == 0) {
      REQUIRE(q.flush(a).ok());
    }
  }
  REQUIRE(q.pending() <= expected.size());
  std::vector<std::uint8_t> got;
  std::uint8_t buf[65536];
  while (!q.empty() || got.size() < expected.size()) {
    REQUIRE(q.flush(a).ok());
    const ssize_t r = ::read(b.fd(), buf, sizeof(buf));
    if (r > 0) {
      got.insert(got.end(), buf, buf + r);
    }
    REQUIRE(got.size() <= expected.size());
  }
  REQUIRE(got == expected);
}

TEST_CASE("KvTable: set_view and add keep stored_bytes and do not keep oversized buffers",
          "[store][protocol]") {
  using store::KvTable;
  KvTable t;
  const std::size_t entry = KvTable::kEntryOverhead;
  const Bytes big(5000, 1);
  t.set_view("k", big);
  REQUIRE(t.stored_bytes() == 1 + 5000 + entry);
  const Bytes small(3, 2);
  t.set_view("k", small);
  REQUIRE(*t.find("k") == small);
  REQUIRE(t.find("k")->capacity() < 1000);
  REQUIRE(t.stored_bytes() == 1 + 3 + entry);
  REQUIRE(t.add("c", 9).value == 9);
  REQUIRE(t.add("c", -10).value == -1);
  REQUIRE(*t.find("c") == to_bytes("-1"));
  REQUIRE(t.stored_bytes() == (1 + 3 + entry) + (1 + 2 + entry));
  // A key created through a view wakes its watch.
  const auto w = t.add_watch({"new"});
  REQUIRE(w != 0);
  REQUIRE_FALSE(t.has_ready());
  t.set_view("new", small);
  REQUIRE(t.has_ready());
  REQUIRE(t.take_ready() == std::vector<KvTable::WatchId>{w});
}
