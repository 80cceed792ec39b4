// SPDX-License-Identifier: BSD-3-Clause
// The control channel of SocketTransport over real (AF_UNIX) sockets in one thread: tagged
// messages go out in chunks, and a control frame queued behind a large tagged send overtakes
// the chunks not yet written, so an abort notice or a status reply never waits for a whole
// large payload. Also: chunked messages arrive intact, expected or not, and a 0-byte one works.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/transports/socket/socket_transport.hpp"

namespace chorus::test {
namespace {

using cpu::FrameType;
using cpu::SocketTransport;
using cpu::TransportEvent;

std::pair<net::Socket, net::Socket> socket_pair() {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
  return {net::Socket(fds[0]), net::Socket(fds[1])};
}

// Two SocketTransports (ranks 0 and 1) joined by a control and a data socket pair.
struct Pair {
  std::unique_ptr<SocketTransport> t[2];
  Pair() {
    cpu::Mesh m[2];
    for (int r = 0; r < 2; ++r) {
      m[r].local_address = "unix:" + std::to_string(r);
      m[r].peers.resize(2);
      m[r].peers[static_cast<std::size_t>(1 - r)].address = "unix:" + std::to_string(1 - r);
    }
    auto control = socket_pair();
    auto data = socket_pair();
    m[0].peers[1].control = std::move(control.first);
    m[1].peers[0].control = std::move(control.second);
    m[0].peers[1].data.push_back(std::move(data.first));
    m[1].peers[0].data.push_back(std::move(data.second));
    t[0] = std::make_unique<SocketTransport>(0, 2, std::move(m[0]), std::vector<int>{0, 1});
    t[1] = std::make_unique<SocketTransport>(1, 2, std::move(m[1]), std::vector<int>{0, 1});
  }
  // One round of progress on both ranks; returns rank 0's events.
  std::vector<TransportEvent> step() {
    std::vector<std::uint64_t> completed;
    std::vector<TransportEvent> events[2];
    t[1]->poll(Deadline::after(std::chrono::milliseconds(1)), completed, events[1]);
    t[0]->poll(Deadline::after(std::chrono::milliseconds(1)), completed, events[0]);
    return std::move(events[0]);
  }
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<std::uint8_t>(i * 131 + seed);
  }
  return v;
}

}  // namespace

TEST_CASE("a control frame overtakes the unsent chunks of a large tagged send", "[tcp][control]") {
  Pair pair;
  const std::size_t big = 8u << 20;  // 32 chunks
  const auto payload = pattern(big, 1);
  std::vector<std::uint8_t> got(big, 0);
  pair.t[0]->recv_p2p(1, 7, got.data(), big, 100);
  pair.t[1]->send_p2p(0, 7, payload.data(), big, 200);  // writes until the socket is full
  pair.t[1]->send_control(0, FrameType::status_reply, {1, 2, 3});

  std::vector<std::string> order;  // what rank 0 saw, in order
  const Deadline bound = Deadline::after(std::chrono::seconds(30));
  while (order.size() < 2 && !bound.expired()) {
    for (auto& ev : pair.step()) {
      if (ev.kind == TransportEvent::Kind::control) {
        CHECK(ev.frame == FrameType::status_reply);
        CHECK(ev.payload == std::vector<std::uint8_t>{1, 2, 3});
        order.push_back("control");
      } else if (ev.kind == TransportEvent::Kind::p2p_done) {
        CHECK(ev.token == 100);
        CHECK(ev.error.empty());
        order.push_back("p2p");
      } else {
        FAIL("unexpected event: " << ev.error);
      }
    }
  }
  REQUIRE(order == std::vector<std::string>{"control", "p2p"});
  CHECK(got == payload);  // the chunks around the control frame reassemble exactly
}

TEST_CASE("chunked tagged messages arrive intact: expected, unexpected, odd sizes, empty",
          "[tcp][control]") {
  Pair pair;
  const std::size_t sizes[] = {0, 1, cpu::kP2pChunkBytes, cpu::kP2pChunkBytes + 1,
                               3 * cpu::kP2pChunkBytes + 5};
  std::vector<std::vector<std::uint8_t>> sent;
  std::vector<std::vector<std::uint8_t>> got;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    sent.push_back(pattern(sizes[i], static_cast<std::uint8_t>(i)));
    got.emplace_back(sizes[i], 0xEE);
  }
  // Even tags have their recv posted before the message comes, odd ones after.
  for (std::size_t i = 0; i < std::size(sizes); i += 2) {
    pair.t[0]->recv_p2p(1, static_cast<std::uint32_t>(i), got[i].data(), sizes[i], 10 + i);
  }
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    pair.t[1]->send_p2p(0, static_cast<std::uint32_t>(i), sent[i].data(), sizes[i], 20 + i);
    pair.t[1]->send_control(0, FrameType::status_request, {static_cast<std::uint8_t>(i)});
  }
  std::size_t done = 0;
  std::size_t controls = 0;
  bool posted_odd = false;
  const Deadline bound = Deadline::after(std::chrono::seconds(30));
  while (done < std::size(sizes) && !bound.expired()) {
    if (!posted_odd && controls == std::size(sizes)) {
      // Post the odd recvs late: messages that already arrived wait as unexpected ones, any
      // still arriving (control frames overtake chunks) are matched when they end.
      for (std::size_t i = 1; i < std::size(sizes); i += 2) {
        pair.t[0]->recv_p2p(1, static_cast<std::uint32_t>(i), got[i].data(), sizes[i], 10 + i);
      }
      posted_odd = true;
    }
    for (auto& ev : pair.step()) {
      if (ev.kind == TransportEvent::Kind::control) {
        ++controls;
      } else if (ev.kind == TransportEvent::Kind::p2p_done) {
        CHECK(ev.error.empty());
        ++done;
      } else {
        FAIL("unexpected event: " << ev.error);
      }
    }
  }
  REQUIRE(done == std::size(sizes));
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes");
    CHECK(got[i] == sent[i]);
  }
}

}  // namespace chorus::test
