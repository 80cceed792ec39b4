// SPDX-License-Identifier: BSD-3-Clause
// Store authentication (docs/protocol.md §1.1): a server with a job token serves only clients
// that prove they know it, proves it back, and never lets an unauthenticated connection run a
// key operation. Loopback only; every blocking call has a deadline or a socket timeout.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/tcp_store.hpp>

#include "store/protocol.hpp"
#include "store/store_auth.hpp"

using namespace std::chrono_literals;
using namespace chorus;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

TcpStoreServerOptions server_options(std::string token) {
  TcpStoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.hello_timeout = 2s;
  o.token = std::move(token);
  return o;
}

TcpStoreOptions client_options(std::uint16_t port, std::optional<std::string> token) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 5s;
  o.token = std::move(token);
  return o;
}

int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// False if the peer went away (never REQUIRE here: the impostor calls it on its own thread).
bool send_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) {
      std::fprintf(stderr, "send: %s\n", std::strerror(errno));
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Reads exactly n bytes; returns how many arrived before EOF/timeout.
std::size_t recv_n(int fd, std::uint8_t* p, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t k = ::recv(fd, p + got, n - got, 0);
    if (k <= 0) {
      break;
    }
    got += static_cast<std::size_t>(k);
  }
  return got;
}

// A raw client: hello, then the server's answer and challenge.
store::Nonce raw_hello(int fd) {
  std::uint8_t hello[store::kHelloBytes];
  store::encode_hello({store::kProtocolVersion, 0}, hello);
  send_all(fd, hello, sizeof hello);
  std::uint8_t answer[store::kHelloBytes];
  REQUIRE(recv_n(fd, answer, sizeof answer) == sizeof answer);
  const auto h = store::decode_hello(answer);
  REQUIRE(h);
  REQUIRE(h->flags == static_cast<std::uint16_t>(store::HelloStatus::auth_required));
  store::Nonce challenge{};
  REQUIRE(recv_n(fd, challenge.data(), challenge.size()) == challenge.size());
  return challenge;
}

std::vector<std::uint8_t> set_frame(const std::string& key, const std::string& value) {
  store::Request q;
  q.op = store::Op::set;
  q.id = 1;
  q.keys = {key};
  q.values = {to_bytes(value)};
  std::vector<std::uint8_t> out;
  store::encode_request(q, out);
  return out;
}

bool closed_by_server(int fd) {
  std::uint8_t b[64];
  for (;;) {
    const ssize_t k = ::recv(fd, b, sizeof b, 0);
    if (k == 0) {
      return true;
    }
    if (k < 0) {
      return errno == ECONNRESET;
    }
  }
}

}  // namespace

TEST_CASE("a client with the job's token is served; the token never crosses the wire",
          "[store][auth]") {
  TcpStoreServer server(server_options(kToken));
  TcpStore a(client_options(server.port(), kToken));
  a.set("k", std::string_view("v"));
  TcpStore b(client_options(server.port(), kToken));
  CHECK(b.get_string("k", 1s) == "v");
}

TEST_CASE("missing, wrong and one-sided tokens fail at connect, saying which side lacks what",
          "[store][auth]") {
  TcpStoreServer with(server_options(kToken));
  TcpStoreServer without(server_options(""));
  SECTION("client without a token") {
    try {
      TcpStore c(client_options(with.port(), ""));
      FAIL("connected without a token");
    } catch (const StoreError& e) {
      CHECK_THAT(e.what(), Catch::Contains("requires a job token and this process has none"));
      CHECK_THAT(e.what(), Catch::Contains("CHORUS_STORE_TOKEN"));
    }
  }
  SECTION("wrong token") {
    try {
      TcpStore c(client_options(with.port(), "another-token-of-enough-length"));
      FAIL("connected with a wrong token");
    } catch (const StoreError& e) {
      CHECK_THAT(e.what(), Catch::Contains("refused this process's job token"));
    }
    // The server is unharmed.
    TcpStore good(client_options(with.port(), kToken));
    good.set("after", std::string_view("ok"));
  }
  SECTION("a token-less server is refused by a client that has a token") {
    try {
      TcpStore c(client_options(without.port(), kToken));
      FAIL("used a server that cannot prove the token");
    } catch (const StoreError& e) {
      CHECK_THAT(e.what(),
                 Catch::Contains("does not require a job token but this process has one"));
    }
  }
  SECTION("tokens that are too short or padded are rejected before connecting") {
    CHECK_THROWS_AS(TcpStore(client_options(with.port(), "short")), InvalidArgument);
    CHECK_THROWS_AS(TcpStore(client_options(with.port(), kToken + "\n")), InvalidArgument);
  }
}

TEST_CASE("CHORUS_STORE_TOKEN is the default token of clients and embedded servers",
          "[store][auth]") {
  ::setenv("CHORUS_STORE_TOKEN", kToken.c_str(), 1);
  TcpStoreOptions o = client_options(0, std::nullopt);
  o.is_server = true;
  TcpStore host(o);  // embedded server: requires the token
  TcpStore member(client_options(host.port(), std::nullopt));
  member.set("k", std::string_view("v"));
  ::unsetenv("CHORUS_STORE_TOKEN");
  CHECK_THROWS_AS(TcpStore(client_options(host.port(), std::nullopt)), StoreError);
  ::setenv("CHORUS_STORE_TOKEN", "tiny", 1);
  CHECK_THROWS_AS(TcpStore(client_options(host.port(), std::nullopt)), InvalidArgument);
  ::unsetenv("CHORUS_STORE_TOKEN");
}

TEST_CASE("an unauthenticated connection runs no key operation", "[store][auth]") {
  TcpStoreServer server(server_options(kToken));
  TcpStore good(client_options(server.port(), kToken));
  SECTION("a set frame instead of the proof") {
    const int fd = raw_connect(server.port());
    (void)raw_hello(fd);
    auto frame = set_frame("stolen", "x");
    frame.resize(std::max<std::size_t>(frame.size(), store::kAuthAnswerBytes), 0);
    send_all(fd, frame.data(), frame.size());
    std::uint8_t verdict = 0xff;
    CHECK(recv_n(fd, &verdict, 1) == 1);
    CHECK(verdict == 1);
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  SECTION("a proof replayed from an earlier challenge") {
    const int first = raw_connect(server.port());
    const store::Nonce old_challenge = raw_hello(first);
    const store::Nonce mine{};
    const net::Mac proof = store::client_proof(kToken, old_challenge, mine);
    std::vector<std::uint8_t> answer(mine.begin(), mine.end());
    answer.insert(answer.end(), proof.begin(), proof.end());
    send_all(first, answer.data(), answer.size());  // valid for that connection
    std::uint8_t verdict[store::kAuthVerdictBytes];
    REQUIRE(recv_n(first, verdict, sizeof verdict) == sizeof verdict);
    CHECK(verdict[0] == 0);
    const int second = raw_connect(server.port());
    (void)raw_hello(second);  // a fresh challenge: the old proof must not pass
    send_all(second, answer.data(), answer.size());
    std::uint8_t refused = 0xff;
    CHECK(recv_n(second, &refused, 1) == 1);
    CHECK(refused == 1);
    CHECK(closed_by_server(second));
    ::close(first);
    ::close(second);
  }
  SECTION("silence after the challenge: closed at the hello timeout") {
    const int fd = raw_connect(server.port());
    (void)raw_hello(fd);
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  CHECK_FALSE(good.check({"stolen"}));
  good.set("still", std::string_view("served"));
}

TEST_CASE("a fake server that cannot prove the token is refused by the client", "[store][auth]") {
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listen_fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listen_fd, 4) == 0);
  REQUIRE(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  // The impostor answers like a server with a token but cannot compute the proof.
  std::thread impostor([listen_fd] {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) {
      return;
    }
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      return;
    }
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::uint8_t hello[store::kHelloBytes];
    recv_n(fd, hello, sizeof hello);
    std::uint8_t answer[store::kHelloBytes];
    store::encode_hello(
        {store::kProtocolVersion, static_cast<std::uint16_t>(store::HelloStatus::auth_required)},
        answer);
    const store::Nonce challenge = store::random_nonce();
    std::uint8_t proof[store::kAuthAnswerBytes];
    std::uint8_t verdict[store::kAuthVerdictBytes] = {0};  // "accepted", with a made-up proof
    if (send_all(fd, answer, sizeof answer) && send_all(fd, challenge.data(), challenge.size()) &&
        recv_n(fd, proof, sizeof proof) == sizeof proof && send_all(fd, verdict, sizeof verdict)) {
      std::uint8_t rest[16];
      recv_n(fd, rest, sizeof rest);  // until the client hangs up
    }
    ::close(fd);
  });
  std::string error;
  try {
    TcpStore c(client_options(ntohs(a.sin_port), kToken));
  } catch (const StoreError& e) {
    error = e.what();
  }
  impostor.join();
  ::close(listen_fd);
  CHECK_THAT(error, Catch::Contains("could not prove it knows the job token"));
}
