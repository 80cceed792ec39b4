// SPDX-License-Identifier: BSD-3-Clause
// Formations of a group in the store (see membership.hpp for the key layout and the rules).
#include "tcp/membership.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "net/address.hpp"
#include "net/connect.hpp"
#include "tcp/handshake.hpp"

namespace chorus::tcp {
namespace {

// How often a waiting rank looks for a clash or a new epoch: the bound on "at once".
constexpr Duration kPollSlice = std::chrono::milliseconds(100);
// Keys named in one bounded wait for the members' addresses.
constexpr std::size_t kKeysPerWait = 64;
// A leader that does not accept a connection within this is treated as gone for now.
constexpr Duration kProbeTimeout = std::chrono::seconds(2);
// A leader that did not answer is probed again after this many slices.
constexpr int kReprobeSlices = 10;

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
std::string addr_key(const std::string& e, int r) {
  return epoch_key(e, fmt::format("addr/{}", r));
}
std::string member_key(const std::string& e, int r) {
  return epoch_key(e, fmt::format("member/{}", r));
}

struct Leader {
  int size = 0;
  std::uint64_t group_id = 0;
  std::string who;
  std::string address;
  GroupSecret secret{};
};

std::optional<Leader> parse_leader(const std::string& text) {
  std::istringstream in(text);
  Leader l;
  std::string id;
  std::string secret;
  if (!(in >> l.size >> id >> l.who >> l.address >> secret) || l.size < 1 ||
      !net::from_hex(secret, l.secret)) {
    return std::nullopt;
  }
  try {
    l.group_id = std::stoull(id, nullptr, 16);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return l;
}

// The current epoch, or "" if none is recorded (no rank 0 yet, or the last one left).
std::string current_epoch(Store& store) {
  if (!store.check({kCurrentEpochKey})) {
    return {};
  }
  try {
    return store.get_string(kCurrentEpochKey, std::chrono::milliseconds(0));
  } catch (const TimeoutError&) {
    return {};  // deleted between check and get
  }
}

std::optional<Leader> read_leader(Store& store, const std::string& epoch) {
  const std::string key = epoch_key(epoch, "leader");
  if (!store.check({key})) {
    return std::nullopt;
  }
  try {
    return parse_leader(store.get_string(key, std::chrono::milliseconds(0)));
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
}

// True if a process accepts connections at the leader's address: a leader record left by a
// process that died is refused (or unreachable), one of a live rank 0 is accepted.
bool leader_alive(const Leader& leader, int my_rank, Deadline deadline) {
  return answers_at(leader.address, leader.group_id, my_rank, leader.size,
                    earliest(deadline, Deadline::after(kProbeTimeout)));
}

// Records the clash for every member of the epoch, then throws it here.
[[noreturn]] void clash(Store& store, const std::string& epoch, const std::string& message) {
  try {
    store.set(epoch_key(epoch, "clash"), message);
  } catch (const Error&) {
    // The message still reaches this rank's caller.
  }
  throw InvalidArgument(message);
}

std::string who_claims(Store& store, const std::string& epoch, int rank) {
  try {
    const std::string m = store.get_string(member_key(epoch, rank), std::chrono::seconds(1));
    return "process " + m.substr(m.find(' ') + 1);
  } catch (const Error&) {
    return "another process";
  }
}

std::optional<std::string> recorded_clash(Store& store, const std::string& epoch) {
  const std::string key = epoch_key(epoch, "clash");
  if (!store.check({key})) {
    return std::nullopt;
  }
  try {
    return store.get_string(key, std::chrono::seconds(1));
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
}

void throw_recorded_clash(Store& store, const std::string& epoch) {
  if (auto message = recorded_clash(store, epoch)) {
    throw InvalidArgument(*message);
  }
}

std::string clash_advice() {
  return "each process of a job needs a distinct RANK in [0, WORLD_SIZE) and the same WORLD_SIZE, "
         "and two jobs that share a store need distinct CHORUS_RUN_IDs";
}

// Waits until every rank's address is in the epoch, looking for clashes and (on rank 0) for a
// second rank 0 between slices.
// The address record: "host:port" and the host id (which never holds a space).
std::string address_record(const MembershipOptions& o) {
  return o.host_id.empty() ? o.local_address : o.local_address + " " + o.host_id;
}

void wait_for_addresses(Store& store, Membership& m, const MembershipOptions& o) {
  const std::string& epoch = m.epoch;
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; ++r) {
    keys.push_back(addr_key(epoch, r));
  }
  // In chunks, so that a large group's ranks do not each re-send every key every slice.
  std::size_t next = 0;
  while (next < keys.size()) {
    const std::size_t end = std::min(keys.size(), next + kKeysPerWait);
    const std::vector<std::string> chunk(keys.begin() + static_cast<std::ptrdiff_t>(next),
                                         keys.begin() + static_cast<std::ptrdiff_t>(end));
    try {
      store.wait(chunk, std::min(kPollSlice, o.deadline.remaining()));
      next = end;
      continue;
    } catch (const TimeoutError&) {
    }
    if (o.between_slices) {
      o.between_slices();
    }
    throw_recorded_clash(store, epoch);
    if (o.rank == 0) {
      const std::string now = current_epoch(store);
      if (!now.empty() && now != epoch) {
        const std::string other = read_leader(store, now).value_or(Leader{}).who;
        clash(store, now,
              fmt::format(
                  "{}: two processes claim rank 0 of this group: this one ({}) and {}; a duplicate "
                  "RANK=0, or another job using the same store and run id; {}",
                  o.where, process_identity(),
                  other.empty() ? "another process" : "process " + other, clash_advice()));
      }
    }
    if (o.deadline.expired()) {
      std::vector<int> missing;
      for (int r = 0; r < o.size; ++r) {
        if (!store.check({keys[static_cast<std::size_t>(r)]})) {
          missing.push_back(r);
        }
      }
      ErrorContext c;
      c.rank = o.rank;
      c.size = o.size;
      c.group = o.group;
      c.op = "connect";
      c.peers = missing;
      c.timeout = o.timeout;
      throw TimeoutError(
          fmt::format(
              "{}: ranks {} never showed up within {} (no address published in the store); "
              "check that they were started with the same store and WORLD_SIZE={}, and their logs",
              o.where, format_ranks(missing), format_duration(o.timeout), o.size),
          c);
    }
  }
  const std::vector<Bytes> values = store.multi_get(keys, o.deadline.remaining());
  m.addresses.clear();
  m.host_ids.clear();
  for (const Bytes& v : values) {
    const std::string record = to_string(v);
    const std::size_t space = record.find(' ');
    m.addresses.push_back(record.substr(0, space));
    m.host_ids.push_back(space == std::string::npos ? std::string() : record.substr(space + 1));
  }
}

std::string member_record(const MembershipOptions& o) {
  return fmt::format("{} {}", o.size, pid_at_host());
}

Membership lead(Store& store, const MembershipOptions& o) {
  // A recorded formation whose rank 0 still answers belongs to another live process claiming
  // rank 0 (a duplicate RANK, or another job on this store and run id); one whose rank 0 is
  // gone was left by an earlier launch and is simply replaced.
  const std::string previous = current_epoch(store);
  if (!previous.empty()) {
    if (auto other = read_leader(store, previous);
        other && leader_alive(*other, o.rank, o.deadline)) {
      clash(
          store, previous,
          fmt::format(
              "{}: two processes claim rank 0 of this group: process {} (at {}) and this one ({}); "
              "a duplicate RANK=0, or another job using the same store and run id; {}",
              o.where, other->who, other->address, process_identity(), clash_advice()));
    }
  }
  Membership m;
  m.epoch = random_epoch();
  m.group_id = random_group_id();
  net::random_bytes(m.secret);
  // Records first, `current` last: whoever reads `current` finds the leader record.
  store.multi_set({epoch_key(m.epoch, "leader"), addr_key(m.epoch, 0), member_key(m.epoch, 0)},
                  {to_bytes(fmt::format("{} {:016x} {} {} {}", o.size, m.group_id, pid_at_host(),
                                        o.local_address, net::to_hex(m.secret))),
                   to_bytes(address_record(o)), to_bytes(member_record(o))});
  store.set(kCurrentEpochKey, m.epoch);
  wait_for_addresses(store, m, o);
  return m;
}

// A rank r > 0: find a formation whose rank 0 is alive, check it, claim our rank in it.
Membership follow(Store& store, const MembershipOptions& o) {
  std::string skipped;  // an epoch whose leader did not answer
  int slices_skipped = 0;
  std::string last_clash;
  for (;;) {
    const std::string epoch = current_epoch(store);
    std::optional<Leader> leader;
    if (!epoch.empty() && epoch != skipped) {
      leader = read_leader(store, epoch);
      if (leader && !leader_alive(*leader, o.rank, o.deadline)) {
        CHORUS_INFO(
            init,
            "{}: rank 0 of the recorded formation (process {} at {}) does not answer; waiting for a "
            "live rank 0 to start a new one",
            o.where, leader->who, leader->address);
        skipped = epoch;
        // A formation that failed on a clash before we came: if no new rank 0 comes, that is
        // the story to tell at the timeout.
        if (auto message = recorded_clash(store, epoch)) {
          last_clash = *message;
        }
        leader.reset();
      }
    }
    if (!leader) {
      if (o.deadline.expired()) {
        ErrorContext c;
        c.rank = o.rank;
        c.size = o.size;
        c.group = o.group;
        c.op = "connect";
        c.peers = {0};
        c.timeout = o.timeout;
        throw TimeoutError(
            fmt::format(
                "{}: rank 0 never showed up within {} ({}); check that it was started with the same "
                "store and run id, and its log{}",
                o.where, format_duration(o.timeout),
                skipped.empty() ? "no formation recorded in the store"
                                : "the store only holds a formation whose rank 0 is gone",
                last_clash.empty() ? "" : "; that formation failed: " + last_clash),
            c);
      }
      // Wait a slice for rank 0 to record a new formation; re-probe a skipped leader now and
      // then, in case it was only slow to answer.
      if (epoch.empty()) {
        try {
          store.wait({kCurrentEpochKey}, std::min(kPollSlice, o.deadline.remaining()));
        } catch (const TimeoutError&) {
        }
      } else {
        std::this_thread::sleep_for(std::min(kPollSlice, o.deadline.remaining()));
      }
      if (++slices_skipped % kReprobeSlices == 0) {
        skipped.clear();
      }
      continue;
    }
    throw_recorded_clash(store, epoch);
    if (leader->size != o.size) {
      clash(
          store, epoch,
          fmt::format(
              "{}: WORLD_SIZE differs between ranks: rank 0 (process {}) has WORLD_SIZE={} but rank {} "
              "({}) has WORLD_SIZE={}; start every rank with the same WORLD_SIZE ({})",
              o.where, leader->who, leader->size, o.rank, process_identity(), o.size,
              clash_advice()));
    }
    if (store.add(claim_key(epoch, o.rank), 1) > 1) {
      clash(store, epoch,
            fmt::format(
                "{}: two processes claim rank {} of this group: {} and this one ({}); a duplicate "
                "RANK={}, or another job using the same store and run id; {}",
                o.where, o.rank, who_claims(store, epoch, o.rank), process_identity(), o.rank,
                clash_advice()));
    }
    store.multi_set({addr_key(epoch, o.rank), member_key(epoch, o.rank)},
                    {to_bytes(address_record(o)), to_bytes(member_record(o))});
    Membership m;
    m.epoch = epoch;
    m.group_id = leader->group_id;
    m.secret = leader->secret;
    wait_for_addresses(store, m, o);
    return m;
  }
}

}  // namespace

bool answers_at(const std::string& address, std::uint64_t group_id, int my_rank, int size,
                Deadline deadline) {
  try {
    const net::HostPort hp = net::parse_host_port(address);
    for (const net::SocketAddress& a : net::resolve(hp.host, hp.port, deadline)) {
      net::Socket s;
      if (net::connect_once(a, deadline, s) == 0) {
        const auto probe = encode_hello({group_id, static_cast<std::uint32_t>(my_rank), 0,
                                         kProbeChannel, 0, static_cast<std::uint32_t>(size)});
        (void)net::send_all(s, probe.data(), probe.size(), deadline);
        return true;
      }
    }
  } catch (const Error&) {
    // An address that does not resolve is as dead as one that refuses.
  }
  return false;
}

std::string epoch_key(const std::string& epoch, const std::string& name) {
  return fmt::format("e{}/{}", epoch, name);
}

std::string pid_at_host() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    host[0] = '?';
  }
  return fmt::format("{}@{}", ::getpid(), host);
}

std::string process_identity() { return "process " + pid_at_host(); }

Membership join_group(Store& store, const MembershipOptions& o) {
  if (o.size == 1) {
    return Membership{{}, random_group_id(), {o.local_address}, {o.host_id}};
  }
  return o.rank == 0 ? lead(store, o) : follow(store, o);
}

void check_no_clash(Store& store, const Membership& m) {
  if (!m.epoch.empty()) {
    throw_recorded_clash(store, m.epoch);
  }
}

void record_gone(Store& store, const Membership& m, int rank, const std::string& message) {
  if (m.epoch.empty()) {
    return;
  }
  try {
    store.compare_set(epoch_key(m.epoch, "gone"), {},
                      to_bytes(fmt::format("{} {}", rank, message)));
  } catch (const Error&) {
    // This rank's own error still names it.
  }
}

std::optional<std::pair<int, std::string>> recorded_gone(Store& store, const Membership& m) {
  const std::string key = epoch_key(m.epoch, "gone");
  if (m.epoch.empty() || !store.check({key})) {
    return std::nullopt;
  }
  const std::string text = store.get_string(key, std::chrono::milliseconds(0));
  const auto space = text.find(' ');
  if (space == std::string::npos) {
    return std::nullopt;
  }
  return std::make_pair(std::atoi(text.substr(0, space).c_str()), text.substr(space + 1));
}

void leave_group(Store& store, const Membership& m, int rank) noexcept {
  if (m.epoch.empty()) {
    return;
  }
  try {
    store.delete_key(addr_key(m.epoch, rank));
    store.delete_key(member_key(m.epoch, rank));
    if (rank != 0) {
      store.delete_key(claim_key(m.epoch, rank));
      return;
    }
    store.delete_key(epoch_key(m.epoch, "leader"));
    if (current_epoch(store) == m.epoch) {
      store.delete_key(kCurrentEpochKey);
    }
  } catch (const std::exception& e) {
    CHORUS_INFO(init, "rank {}: could not remove the group's store keys: {}", rank, e.what());
  }
}

}  // namespace chorus::tcp
