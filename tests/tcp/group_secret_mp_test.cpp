// SPDX-License-Identifier: BSD-3-Clause
// The group secret and the job token (tcp/group_key.hpp): with a token, what the store holds
// (`current`: the seed) is not the key of the membership proofs, so a reader of an open store
// (torch's TCPStore has no authentication) cannot join; ranks whose tokens differ fail the
// formation at once with a message naming CHORUS_STORE_TOKEN, never a hang.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "cpu/bootstrap/formation_records.hpp"
#include "cpu/bootstrap/group_key.hpp"
#include "cpu/bootstrap/handshake.hpp"
#include "cpu/bootstrap/membership.hpp"
#include "net/address.hpp"
#include "net/hmac.hpp"
#include "net/socket.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

const std::string kToken = "job-token-0123456789abcdef0123456789abcdef";
const std::string kOtherToken = "job-token-fedcba9876543210fedcba9876543210";

// A store client that never authenticates, whatever CHORUS_STORE_TOKEN says: the store is open,
// as torch's is, while the ranks' tokens are the subject.
std::shared_ptr<Store> open_store(std::uint16_t port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 30s;
  o.token = "";
  return std::make_shared<TcpStore>(o);
}

void set_token(const std::optional<std::string>& token) {
  if (token) {
    ::setenv("CHORUS_STORE_TOKEN", token->c_str(), 1);
  } else {
    ::unsetenv("CHORUS_STORE_TOKEN");
  }
}

float allreduce_one(ProcessGroup& pg, float value) {
  float x = value;
  pg.allreduce(Tensor::of(&x, 1))->wait();
  return x;
}

// `current` as a reader of the store sees it: "<epoch> <size> <group id> <who> <address>
// <seed> [<key>]".
struct Record {
  int size = 0;
  std::uint64_t group_id = 0;
  cpu::GroupSecret stored{};
};

Record read_record(Store& group_ns) {
  std::istringstream in(group_ns.get_string(cpu::kCurrentEpochKey, 30s));
  std::string epoch, id, who, address, stored;
  Record r;
  in >> epoch >> r.size >> id >> who >> address >> stored;
  CHILD_CHECK(net::from_hex(stored, r.stored));
  r.group_id = std::stoull(id, nullptr, 16);
  return r;
}

// Rank r's "host:port": the address in its claim record.
std::string address_of(Store& group_ns, int rank) {
  std::string epoch = group_ns.get_string(cpu::kCurrentEpochKey, 30s);
  epoch = epoch.substr(0, epoch.find(' '));
  const std::string record = group_ns.get_string(cpu::formation::claim_key(epoch, rank), 30s);
  return cpu::formation::parse_claim(record).value_or(cpu::formation::Claim{}).address;
}

int dial(const std::string& address) {
  const net::HostPort hp = net::parse_host_port(address);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    throw ChildCheckFailed{"could not connect to " + address};
  }
  return fd;
}

// One handshake as rank `claim` of the group, dialing rank `target`, with `secret` as the key.
struct Attempt {
  net::Socket socket;
  cpu::Open open{};
  std::array<std::uint8_t, cpu::kAnswerBytes> answer{};
};

Attempt send_open(const std::string& address, const Record& r, int claim, int target) {
  Attempt a;
  a.open = cpu::make_open({r.group_id, static_cast<std::uint32_t>(claim),
                           static_cast<std::uint32_t>(target), 0, 2,
                           static_cast<std::uint32_t>(r.size)});
  a.socket = net::Socket(dial(address));
  CHILD_CHECK(::write(a.socket.fd(), a.open.data(), a.open.size()) ==
              static_cast<ssize_t>(a.open.size()));
  return a;
}

bool accept_proof_valid(const Attempt& a, const cpu::GroupSecret& secret) {
  net::Mac theirs{};
  std::copy(a.answer.begin() + cpu::kOpenBytes, a.answer.end(), theirs.begin());
  return net::equal_macs(theirs, cpu::accept_proof(secret, a.open.data(), a.answer.data()));
}

// Sends the connect proof made with `secret`; true if the rank then closes the connection
// without sending a byte (refused), false if anything arrives.
bool refused_after_proof(const Attempt& a, const cpu::GroupSecret& secret) {
  const net::Mac mine = cpu::connect_proof(secret, a.open.data(), a.answer.data());
  CHILD_CHECK(::write(a.socket.fd(), mine.data(), mine.size()) ==
              static_cast<ssize_t>(mine.size()));
  std::uint8_t byte = 0;
  pollfd p{a.socket.fd(), POLLIN, 0};
  CHILD_CHECK(::poll(&p, 1, 20000) == 1);  // closed within the bound, or data
  return ::read(a.socket.fd(), &byte, 1) <= 0;
}

bool failed_with(const ChildResult& r, ErrorCode code, const std::string& part) {
  return r.exited && r.exit_code == kChildChorusError + static_cast<int>(code) &&
         contains(r.message, part);
}

}  // namespace

TEST_CASE("the group secret derives from the job token, the seed and the group id",
          "[tcp][membership][token]") {
  cpu::GroupSecret seed{};
  seed[0] = 7;
  const auto secret = cpu::derive_group_secret(kToken, seed, 42);
  CHECK(secret != seed);
  CHECK(secret == cpu::derive_group_secret(kToken, seed, 42));
  CHECK(secret != cpu::derive_group_secret(kOtherToken, seed, 42));
  CHECK(secret != cpu::derive_group_secret(kToken, seed, 43));
  cpu::GroupSecret other_seed = seed;
  other_seed[31] = 1;
  CHECK(secret != cpu::derive_group_secret(kToken, other_seed, 42));
  // The check that goes into the store is not the secret.
  const auto check = cpu::token_check(kToken, seed, 42);
  CHECK(check != secret);
  CHECK(cpu::token_mismatch(kToken, &check, seed, 42, "rank 0", "rank 1").empty());
  CHECK(cpu::token_mismatch("", nullptr, seed, 42, "rank 0", "rank 1").empty());
  for (const std::string& why :
       {cpu::token_mismatch(kOtherToken, &check, seed, 42, "rank 0", "rank 1"),
        cpu::token_mismatch("", &check, seed, 42, "rank 0", "rank 1"),
        cpu::token_mismatch(kToken, nullptr, seed, 42, "rank 0", "rank 1")}) {
    INFO(why);
    CHECK(contains(why, "job tokens differ"));
    CHECK(contains(why, "CHORUS_STORE_TOKEN"));
    CHECK(contains(why, "rank 0"));
    CHECK(contains(why, "rank 1"));
  }
}

// Ranks 0 and 2 form; a stranger who reads the whole `current` record dials rank 2 claiming
// rank 1 before the real rank 1 starts (so rank 2 answers it: no link to rank 1 exists yet),
// three times: with the stored bytes as the key, with a key derived from a wrong token, and
// with the right token (the control: the derivation is the documented one). The first two are
// refused (rank 2's proof does not verify with their key; their own proof gets the connection
// closed with nothing sent); the group forms beside them and computes the right sum.
// The token comes from CHORUS_STORE_TOKEN over an open store, or from the group's chorus
// TcpStore (built with a token, no CHORUS_STORE_TOKEN).
TEST_CASE("with a job token, what the store holds does not let a reader join",
          "[tcp][mp][membership][token]") {
  const bool from_store = GENERATE(false, true);
  INFO((from_store ? "the TcpStore's token" : "CHORUS_STORE_TOKEN over an open store"));
  TcpStoreServerOptions so;
  if (from_store) {
    so.token = kToken;
  }
  StoreServerProcess server(so);
  const auto port = server.port();
  auto results = run_processes(
      4,
      [port, from_store](int who) {
        std::shared_ptr<Store> base;
        if (from_store) {
          set_token(std::nullopt);
          TcpStoreOptions o{.host = "127.0.0.1", .port = port, .timeout = 30s};
          o.token = kToken;
          base = std::make_shared<TcpStore>(o);
        } else {
          set_token(kToken);
          base = open_store(port);
        }
        auto ns = make_prefix_store("job", base);
        if (who == 3) {  // the stranger, who can read every key
          auto group_ns = make_prefix_store("tcp/g1", ns);
          const std::string target = address_of(*group_ns, 2);
          const Record r = read_record(*group_ns);
          std::vector<Attempt> attempts;
          for (int i = 0; i < 3; ++i) {
            attempts.push_back(send_open(target, r, 1, 2));
          }
          base->set("go", std::string_view("1"));  // rank 1 connects after the stranger
          for (auto& a : attempts) {
            CHILD_CHECK(
                net::recv_exact(a.socket, a.answer.data(), a.answer.size(), Deadline::after(20s))
                    .ok());
          }
          const cpu::GroupSecret wrong =
              cpu::derive_group_secret(kOtherToken, r.stored, r.group_id);
          const cpu::GroupSecret right = cpu::derive_group_secret(kToken, r.stored, r.group_id);
          if (accept_proof_valid(attempts[0], r.stored)) {
            throw ChildCheckFailed{
                "the bytes in the store are the group secret: a reader can join"};
          }
          CHILD_CHECK(refused_after_proof(attempts[0], r.stored));
          CHILD_CHECK(!accept_proof_valid(attempts[1], wrong));
          CHILD_CHECK(refused_after_proof(attempts[1], wrong));
          CHILD_CHECK(accept_proof_valid(attempts[2], right));
          return;  // the attempts' sockets close here
        }
        if (who == 1) {
          base->get("go", 60s);
        }
        auto pg = make_tcp_group(ns, who, 3, loopback_options(30s));
        CHILD_CHECK(allreduce_one(*pg, 1.0f) == 3.0f);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

// Rank 1's token differs from rank 0's (another value, none, or rank 0 has none): both fail at
// once (the group timeout is 60 s) with InvalidArgument naming CHORUS_STORE_TOKEN and both
// processes.
TEST_CASE("ranks whose job tokens differ fail at once, naming CHORUS_STORE_TOKEN",
          "[tcp][mp][membership][token]") {
  using Tokens = std::pair<std::optional<std::string>, std::optional<std::string>>;
  const Tokens tokens = GENERATE(Tokens{kToken, kOtherToken}, Tokens{kToken, std::nullopt},
                                 Tokens{std::nullopt, kToken});
  INFO(fmt::format("rank 0 {}, rank 1 {}", tokens.first ? *tokens.first : "(none)",
                   tokens.second ? *tokens.second : "(none)"));
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      2,
      [port, tokens](int rank) {
        set_token(rank == 0 ? tokens.first : tokens.second);
        const auto t0 = Clock::now();
        try {
          auto pg = make_tcp_group(make_prefix_store("job", open_store(port)), rank, 2,
                                   loopback_options(60s));
        } catch (const InvalidArgument&) {
          CHILD_CHECK(seconds_since(t0) < 15.0);
          throw;
        }
        throw ChildCheckFailed{"the group formed although the ranks' job tokens differ"};
      },
      40s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(failed_with(r, ErrorCode::invalid_argument, "job tokens differ"));
    CHECK(contains(r.message, "CHORUS_STORE_TOKEN"));
    CHECK(contains(r.message, "rank 0 (process "));
    CHECK(contains(r.message, "rank 1 (process "));
  }
}

}  // namespace chorus::test
