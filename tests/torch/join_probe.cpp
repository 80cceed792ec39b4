// SPDX-License-Identifier: BSD-3-Clause
// chorus_join_probe: tries to join a running tcp group the way a stranger who read its store
// would, with the membership handshake of tcp/handshake.hpp (test-only; tests/torch's
// "stranger" case runs it as an unprivileged user).
//
//   chorus_join_probe ADDRESS RECORD CLAIM TARGET CHANNELS KEY...
//     ADDRESS   host:port of rank TARGET (from the store)
//     RECORD    the group's `current` record as read from the store
//     CLAIM     the rank the probe claims to be; TARGET the rank it dials
//     CHANNELS  sockets per peer pair (control + data) of the group
//     KEY       the membership secret to try: "hex:<64 hex digits>" (bytes read from the store)
//               or "token:<text>" (derived from that job token as a rank would)
//
// One connection per KEY; one line per KEY:
//   probe KEY: answered=yes accept_proof=invalid after_proof=closed   (refused: cannot join)
//   probe KEY: answered=yes accept_proof=valid after_proof=skipped    (the key is the group's)
// With a valid key the probe does not send its proof: that would make it a member for real
// and disturb the job; verifying the rank's proof already shows it could. Every read has a
// 10 s deadline. Exit 0 when every attempt ran, 2 on bad arguments or an unreachable rank.
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/bootstrap/group_key.hpp"
#include "cpu/bootstrap/handshake.hpp"
#include "net/address.hpp"
#include "net/connect.hpp"
#include "net/hmac.hpp"
#include "net/socket.hpp"

namespace {

using namespace chorus;

constexpr auto kWait = std::chrono::seconds(10);

struct Record {
  int size = 0;
  std::uint64_t group_id = 0;
  cpu::GroupSecret seed{};
};

bool parse_record(const std::string& text, Record& r) {
  std::istringstream in(text);
  std::string epoch, id, who, address, seed;
  if (!(in >> epoch >> r.size >> id >> who >> address >> seed)) {
    return false;
  }
  r.group_id = std::stoull(id, nullptr, 16);
  return net::from_hex(seed, r.seed);
}

bool key_of(const std::string& arg, const Record& r, cpu::GroupSecret& out) {
  if (arg.rfind("hex:", 0) == 0) {
    return net::from_hex(arg.substr(4), out);
  }
  if (arg.rfind("token:", 0) == 0) {
    out = cpu::derive_group_secret(arg.substr(6), r.seed, r.group_id);
    return true;
  }
  return false;
}

// One handshake attempt; returns the report line's fields.
std::string attempt(const net::SocketAddress& target, const Record& r, int claim, int rank,
                    int channels, const cpu::GroupSecret& secret) {
  const Deadline deadline = Deadline::after(kWait);
  net::Socket s;
  if (net::connect_once(target, deadline, s) != 0) {
    return "answered=no (connect failed)";
  }
  const cpu::Open open = cpu::make_open(
      {r.group_id, static_cast<std::uint32_t>(claim), static_cast<std::uint32_t>(rank), 0,
       static_cast<std::uint16_t>(channels), static_cast<std::uint32_t>(r.size)});
  if (!net::send_all(s, open.data(), open.size(), deadline).ok()) {
    return "answered=no (send failed)";
  }
  std::array<std::uint8_t, cpu::kAnswerBytes> answer{};
  if (!net::recv_exact(s, answer.data(), answer.size(), deadline).ok()) {
    return "answered=no";
  }
  net::Mac theirs{};
  std::copy(answer.begin() + cpu::kOpenBytes, answer.end(), theirs.begin());
  if (net::equal_macs(theirs, cpu::accept_proof(secret, open.data(), answer.data()))) {
    return "answered=yes accept_proof=valid after_proof=skipped";
  }
  const net::Mac mine = cpu::connect_proof(secret, open.data(), answer.data());
  if (!net::send_all(s, mine.data(), mine.size(), deadline).ok()) {
    return "answered=yes accept_proof=invalid after_proof=closed";
  }
  // Refused: the rank closes without a byte. Accepted: the link would carry the rank's traffic.
  std::uint8_t byte = 0;
  pollfd p{s.fd(), POLLIN, 0};
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
  if (::poll(&p, 1, static_cast<int>(ms.count())) <= 0) {
    return "answered=yes accept_proof=invalid after_proof=silent";
  }
  return ::read(s.fd(), &byte, 1) <= 0 ? "answered=yes accept_proof=invalid after_proof=closed"
                                       : "answered=yes accept_proof=invalid after_proof=open";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: chorus_join_probe ADDRESS RECORD CLAIM TARGET CHANNELS KEY...\n");
    return 2;
  }
  try {
    Record r;
    if (!parse_record(argv[2], r)) {
      std::fprintf(stderr, "chorus_join_probe: cannot parse the record \"%s\"\n", argv[2]);
      return 2;
    }
    const net::HostPort hp = net::parse_host_port(argv[1]);
    const auto targets = net::resolve(hp.host, hp.port, Deadline::after(kWait));
    if (targets.empty()) {
      std::fprintf(stderr, "chorus_join_probe: %s does not resolve\n", argv[1]);
      return 2;
    }
    for (int i = 6; i < argc; ++i) {
      cpu::GroupSecret secret{};
      if (!key_of(argv[i], r, secret)) {
        std::fprintf(stderr, "chorus_join_probe: bad KEY \"%s\" (hex:<64 hex> or token:<text>)\n",
                     argv[i]);
        return 2;
      }
      const std::string result = attempt(targets.front(), r, std::stoi(argv[3]), std::stoi(argv[4]),
                                         std::stoi(argv[5]), secret);
      std::printf("probe %s: %s\n", argv[i], result.c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus_join_probe: %s\n", e.what());
    return 2;
  }
  return 0;
}
