// SPDX-License-Identifier: BSD-3-Clause
// The records of a group formation in the store (see formation_records.hpp).
#include "cpu/bootstrap/formation_records.hpp"

#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "net/hmac.hpp"

namespace chorus::cpu::formation {
namespace {

// The key field after the seed: "open" (the seed is the secret) or "token:<check hex>". A
// record without one is "open".
constexpr std::string_view kOpenKey = "open";
constexpr std::string_view kTokenKey = "token:";

}  // namespace

std::string random_epoch() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

std::uint64_t random_group_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;
}

std::string claim_key(const std::string& e, int r) {
  return epoch_key(e, fmt::format("claim/{}", r));
}

// The value of `key`, or "" if it does not exist: one round trip, no wait. (A compare_set
// whose expected value no record ever holds changes nothing and returns what is there.)
std::string peek(Store& store, const std::string& key) {
  static const Bytes kNever = to_bytes(std::string_view("\x01never-stored"));
  const Bytes b = store.compare_set(key, kNever, kNever);
  return b == kNever ? std::string() : to_string(b);
}

std::optional<Leader> parse_leader(const std::string& text) {
  std::istringstream in(text);
  Leader l;
  std::string id;
  std::string seed;
  if (!(in >> l.size >> id >> l.who >> l.address >> seed) || l.size < 1 ||
      !net::from_hex(seed, l.seed)) {
    return std::nullopt;
  }
  if (std::string key; in >> key && key != kOpenKey) {
    GroupSecret check{};
    if (key.rfind(kTokenKey, 0) != 0 || !net::from_hex(key.substr(kTokenKey.size()), check)) {
      return std::nullopt;
    }
    l.token_check = check;
  }
  try {
    l.group_id = std::stoull(id, nullptr, 16);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return l;
}

Current parse_current(std::string raw) {
  Current c;
  const std::size_t space = raw.find(' ');
  c.epoch = raw.substr(0, space);
  if (space != std::string::npos) {
    c.leader = parse_leader(raw.substr(space + 1));
  }
  c.raw = std::move(raw);
  return c;
}

Current read_current(Store& store) { return parse_current(peek(store, kCurrentEpochKey)); }

Current await_current(Store& store, Duration timeout) {
  try {
    return parse_current(store.get_string(kCurrentEpochKey, timeout));
  } catch (const TimeoutError&) {
    return {};
  }
}

std::string leader_record(const Leader& l) {
  return fmt::format(
      "{} {:016x} {} {} {} {}", l.size, l.group_id, l.who, l.address, net::to_hex(l.seed),
      l.token_check ? std::string(kTokenKey) + net::to_hex(*l.token_check) : std::string(kOpenKey));
}

// True if a process accepts connections at the leader's address: a leader record left by a
// process that died is refused (or unreachable), one of a live rank 0 is accepted.
bool leader_alive(const Leader& leader, int my_rank, Deadline deadline) {
  return answers_at(leader.address, leader.group_id, my_rank, leader.size,
                    earliest(deadline, Deadline::after(kProbeTimeout)));
}

std::int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string claim_record(const MembershipOptions& o) {
  std::string record = fmt::format("{} {} {}", o.size, pid_at_host(), o.local_address);
  if (!o.host_id.empty()) {
    record += " " + o.host_id;
  }
  return record;
}

std::optional<Claim> parse_claim(const std::string& record) {
  std::istringstream in(record);
  Claim c;
  if (!(in >> c.size >> c.who >> c.address)) {
    return std::nullopt;
  }
  in >> c.host_id;
  return c;
}

// The host map of the `state` record: each rank's host as an index in order of first
// appearance, run-length coded ("0*4 1*4" for two hosts of four consecutive ranks). A rank
// without a host id is a host of its own.
std::string encode_host_map(const std::vector<Bytes>& claims) {
  std::map<std::string, int> index;
  std::string out;
  int run_host = -1;
  int run_length = 0;
  auto flush = [&] {
    if (run_length > 0) {
      out += fmt::format("{}{}*{}", out.empty() ? "" : " ", run_host, run_length);
    }
  };
  for (std::size_t r = 0; r < claims.size(); ++r) {
    const std::optional<Claim> claim = parse_claim(to_string(claims[r]));
    const std::string id =
        claim && !claim->host_id.empty() ? claim->host_id : "\n" + std::to_string(r);
    const int host = index.emplace(id, static_cast<int>(index.size())).first->second;
    if (host == run_host) {
      ++run_length;
      continue;
    }
    flush();
    run_host = host;
    run_length = 1;
  }
  flush();
  return out;
}

// Calls run(host, count) for each run of the host map; false if the map is malformed or does
// not cover exactly `size` ranks.

}  // namespace chorus::cpu::formation
