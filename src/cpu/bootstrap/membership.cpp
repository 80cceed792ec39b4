// SPDX-License-Identifier: BSD-3-Clause
// Formations of a group in the store (see membership.hpp for the key layout and the rules): the
// protocol itself (lead, follow, wait for the outcome, fetch addresses, leave). Its records are
// formation_records.*, clashes formation_clash.*, the timeout's story formation_timeout.*.
#include "cpu/bootstrap/membership.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "cpu/bootstrap/formation_clash.hpp"
#include "cpu/bootstrap/formation_records.hpp"
#include "cpu/bootstrap/formation_timeout.hpp"
#include "cpu/bootstrap/group_key.hpp"
#include "cpu/bootstrap/handshake.hpp"
#include "net/address.hpp"
#include "net/connect.hpp"

namespace chorus::cpu {
namespace {

using namespace formation;

// How often a waiting rank looks at the deadline; rank 0 also drains its listener then.
constexpr Duration kLeaderSlice = std::chrono::milliseconds(100);
constexpr Duration kFollowerSlice = std::chrono::seconds(1);
// After each slice a waiting rank makes two store round trips (it looks whether `current` still
// names its formation, then waits again). Large groups take longer to form, and all their ranks
// wait at once: their slice grows with the world size so that these looks stay under about a
// thousand a second for the whole group, a small part of what the store serves.
Duration follower_slice(int size) {
  return std::clamp<Duration>(std::chrono::milliseconds(size), kFollowerSlice,
                              std::chrono::seconds(30));
}
// A rank waiting for a new rank 0 looks at `current` this often.
constexpr Duration kPollSlice = std::chrono::milliseconds(100);
// A skipped formation (its rank 0 did not answer) is probed again after this many slices.
constexpr int kReprobeSlices = 10;
// fetch_addresses: a read of addresses that were all present waits at most this long before
// it looks again whether one of them has gone (its rank left meanwhile).
constexpr Duration kAddressWait = std::chrono::seconds(1);

// Keeps the address of each claim record read for `ranks`.
void store_addresses(Membership& m, const std::vector<int>& ranks,
                     const std::vector<Bytes>& claims) {
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string record = to_string(claims[i]);
    const std::optional<Claim> claim = parse_claim(record);
    if (!claim) {
      throw StoreError(fmt::format(
          "rank {}'s claim record in the store is unreadable (\"{:.60}\"); was the group's "
          "namespace written by another program?",
          ranks[i], record));
    }
    m.addresses[ranks[i]] = claim->address;
  }
}

// Removes what this rank wrote into a formation it gives up on (a dead rank 0, superseded).
void withdraw(Store& store, const std::string& epoch, int rank) {
  store.delete_key(claim_key(epoch, rank));
  store.add(epoch_key(epoch, "joined"), -1);
}

// The count is complete: unless rank 0 is gone, read every claim once and record the
// formation as formed with its host map. False if rank 0 does not answer.
bool complete_formation(Store& store, const std::string& epoch, const Leader& leader,
                        const MembershipOptions& o) {
  if (!peek(store, epoch_key(epoch, "state")).empty()) {
    return true;  // already decided (a clash): the wait for the state reports it
  }
  if (o.rank != 0 && !leader_alive(leader, o.rank, o.deadline)) {
    return false;
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(o.size));
  for (int r = 0; r < o.size; ++r) {
    keys.push_back(claim_key(epoch, r));
  }
  // Every counted rank claimed before it counted: this does not wait.
  std::vector<Bytes> records;
  try {
    records = store.multi_get(keys, o.deadline.remaining());
  } catch (const TimeoutError&) {
    throw_formation_timeout(store, epoch, o, nullptr);
  }
  store.compare_set(epoch_key(epoch, "state"), {}, to_bytes("formed " + encode_host_map(records)));
  return true;
}

enum class Outcome { formed, superseded, timed_out, clashed };

// The error of a formation given up (MembershipOptions::give_up), here or by another member.
Error given_up(const MembershipOptions& o, const std::string& why) {
  return Error(ErrorCode::aborted, fmt::format("{}: the formation was given up: {}", o.where, why),
               setup_error_context(o.rank, o.size, o.group, o.timeout, {}));
}

// Gives the formation up if o.give_up says so: its state says why, which wakes every rank
// waiting for that state, and this rank throws.
void give_up_if_asked(Store& store, const std::string& epoch, const MembershipOptions& o) {
  if (!o.give_up) {
    return;
  }
  std::string why = o.give_up();
  if (why.empty()) {
    return;
  }
  if (!epoch.empty()) {
    store.compare_set(epoch_key(epoch, "state"), {}, to_bytes("abandoned " + why));
  }
  throw given_up(o, why);
}

// Waits for the formation's state. Throws its clash; returns formed (host ids set),
// superseded, timed_out (the deadline passed first), or clashed (`watch` gave up on the ranks
// still missing: `clash_message` says why).
// `leader_record`: rank 0's record in `current`, put back when it goes missing while rank 0 waits.
Outcome await_state(Store& store, Membership& m, const MembershipOptions& o,
                    ClashWatch* watch = nullptr, std::string* clash_message = nullptr,
                    const std::string* leader_record = nullptr) {
  const std::string key = epoch_key(m.epoch, "state");
  const Duration slice = o.rank == 0 ? kLeaderSlice : follower_slice(o.size);
  std::vector<std::string> prefetch;
  for (int r : o.prefetch) {
    prefetch.push_back(claim_key(m.epoch, r));
  }
  for (;;) {
    std::string state;
    std::vector<std::optional<Bytes>> claims;
    try {
      KeyWithOthers got = store.get_with(key, prefetch, std::min(slice, o.deadline.remaining()));
      state = to_string(got.value);
      claims = std::move(got.others);
    } catch (const TimeoutError&) {
      if (o.between_slices) {
        o.between_slices();
      }
      give_up_if_asked(store, m.epoch, o);
      if (o.deadline.expired()) {
        return Outcome::timed_out;
      }
      if (watch != nullptr) {
        if (std::string why = watch->give_up(store); !why.empty()) {
          *clash_message = std::move(why);
          return Outcome::clashed;
        }
      }
      // A member waiting in a formation that `current` no longer names waits in vain: its
      // members destroyed the group and removed its records (the claim this rank took was
      // one of theirs), or a new rank 0 replaced it.
      if (o.rank != 0 && read_current(store).epoch != m.epoch) {
        return Outcome::superseded;
      }
      // The last member of this namespace's previous group, leaving, removes `current` when
      // it still names that group; its read and its removal are two requests, and rank 0's
      // new record can land between them. Members never find a removed record: put it back
      // (only where it is missing; a record another rank 0 wrote stays).
      if (leader_record != nullptr) {
        store.compare_set(kCurrentEpochKey, {}, to_bytes(*leader_record));
      }
      continue;
    }
    if (state.rfind("clash ", 0) == 0) {
      throw InvalidArgument(state.substr(6));
    }
    if (state == "superseded") {
      return Outcome::superseded;
    }
    if (state.rfind("abandoned ", 0) == 0) {
      throw given_up(o, state.substr(10));
    }
    if (state.rfind("formed ", 0) == 0 &&
        for_each_host_run(state.substr(7), o.size, [](long, long) {})) {
      m.host_map = state.substr(7);
      // A claim missing now belongs to a rank that left already: fetch_addresses says so.
      for (std::size_t i = 0; i < claims.size(); ++i) {
        if (claims[i]) {
          if (const std::optional<Claim> claim = parse_claim(to_string(*claims[i]))) {
            m.addresses[o.prefetch[i]] = claim->address;
          }
        }
      }
      return Outcome::formed;
    }
    throw StoreError(
        fmt::format("{}: the formation's state record in the store is unreadable "
                    "(\"{:.60}\"); was the namespace written by another program?",
                    o.where, state));
  }
}

// Why this rank's job token cannot join the leader's formation ("" if it can).
std::string token_clash(const Leader& leader, const MembershipOptions& o) {
  return cpu::token_mismatch(o.token, leader.token_check ? &*leader.token_check : nullptr,
                             leader.seed, leader.group_id,
                             fmt::format("rank 0 (process {})", leader.who),
                             fmt::format("rank {} ({})", o.rank, process_identity()));
}

// The formation's membership secret as this rank holds it: derived from the job token when
// rank 0 had one (the store holds only the seed), else the recorded bytes themselves. A rank
// whose token does not match never gets here (follow() fails the formation first).
Membership membership_of(const std::string& epoch, const Leader& leader,
                         const MembershipOptions& o) {
  Membership m;
  m.epoch = epoch;
  m.group_id = leader.group_id;
  m.secret =
      leader.token_check ? derive_group_secret(o.token, leader.seed, leader.group_id) : leader.seed;
  m.size = o.size;
  m.addresses[o.rank] = o.local_address;
  return m;
}

Membership lead(Store& store, const MembershipOptions& o) {
  // A recorded formation whose rank 0 still answers belongs to another live process claiming
  // rank 0 (a duplicate RANK, or another job on this store and run id); one whose rank 0 is
  // gone was left by an earlier launch: it is superseded, which frees anyone waiting in it.
  const Current previous = read_current(store);
  if (!previous.epoch.empty()) {
    if (const auto& other = previous.leader; other && leader_alive(*other, o.rank, o.deadline)) {
      clash(
          store, previous.epoch,
          fmt::format(
              "{}: two processes claim rank 0 of this group: process {} (at {}) and this one ({}); "
              "a duplicate RANK=0, or another job using the same store and run id; {}",
              o.where, other->who, other->address, process_identity(), clash_advice()));
    }
    store.compare_set(epoch_key(previous.epoch, "state"), {},
                      to_bytes(std::string_view("superseded")));
  }
  Leader me;
  me.size = o.size;
  me.group_id = random_group_id();
  me.who = pid_at_host();
  me.address = o.local_address;
  net::random_bytes(me.seed);
  if (!o.token.empty()) {
    me.token_check = token_check(o.token, me.seed, me.group_id);
  } else {
    note_tokenless_group(o.where);
  }
  const std::string epoch = random_epoch();
  Membership m = membership_of(epoch, me, o);
  // The claim first, `current` last: whoever reads `current` finds rank 0's claim.
  store.set(claim_key(epoch, 0), claim_record(o));
  const std::string mine = epoch + " " + leader_record(me);
  Current now = parse_current(
      to_string(store.compare_set(kCurrentEpochKey, to_bytes(previous.raw), to_bytes(mine))));
  if (!previous.raw.empty() && (now.raw.empty() || now.raw == previous.raw)) {
    // `current` was removed between the read and this write: the last member of the group it
    // named left (leave_group) while this process made its next group in the same namespace
    // (torch's init_process_group again on the same store). A compare-and-set of a missing key
    // answers nothing (chorus's store) or the expected value (torch's): create the record.
    now = parse_current(to_string(store.compare_set(kCurrentEpochKey, {}, to_bytes(mine))));
  }
  if (now.raw != mine) {
    // Another rank 0 started a formation between our read and our write.
    const std::string message = fmt::format(
        "{}: two processes claim rank 0 of this group: this one ({}) and {}; a duplicate RANK=0, "
        "or another job using the same store and run id; {}",
        o.where, process_identity(),
        now.leader ? "process " + now.leader->who : std::string("another process"), clash_advice());
    store.compare_set(epoch_key(now.epoch, "state"), {}, to_bytes("clash " + message));
    clash(store, epoch, message);
  }
  if (store.add(epoch_key(epoch, "joined"), 1) == o.size) {
    complete_formation(store, epoch, me, o);
  }
  // A rank that clashed elsewhere in this namespace (in the formation this one replaced, or
  // in another job's) will not come here: wait for the missing ranks only kClashGrace more.
  ClashWatch watch(1);
  std::string clashed;
  switch (await_state(store, m, o, &watch, &clashed, &mine)) {
    case Outcome::formed:
      return m;
    case Outcome::clashed: {
      std::vector<int> missing;
      find_missing(store, epoch, 0, o.size, missing);
      // Into this formation's state (its members fail at once), not the namespace's record:
      // this is the same clash, and its time is the one that counts.
      clash(store, epoch,
            fmt::format("{}: ranks {} did not join within {} of a clash recorded for this group "
                        "in the store (they may have met it and failed): {}",
                        o.where, missing.empty() ? std::string("(none)") : format_ranks(missing),
                        format_duration(kClashGrace), clashed),
            false);
    }
    case Outcome::superseded:
      throw InvalidArgument(fmt::format(
          "{}: another process ({}) took over rank 0 of this group while this one ({}) was "
          "forming it (this one did not answer its check in time); {}",
          o.where, read_current(store).leader.value_or(Leader{}).who, process_identity(),
          clash_advice()));
    case Outcome::timed_out:
      break;
  }
  throw_formation_timeout(store, epoch, o, nullptr);
}

// A rank r > 0: find the current formation, check it, claim our rank in it, publish, count.
Membership follow(Store& store, const MembershipOptions& o) {
  std::string skipped;  // a formation whose rank 0 did not answer
  int slices_skipped = 0;
  // While no live rank 0 leads: the namespace's clash record, looked at once a second.
  ClashWatch watch(static_cast<int>(kFollowerSlice / kPollSlice));
  for (;;) {
    // Ranks usually start before rank 0 has recorded its formation: wait for it here, in the
    // same round trip as the read, rather than look again after it.
    const Current current =
        await_current(store, std::min<Duration>(kPollSlice, o.deadline.remaining()));
    const std::string& epoch = current.epoch;
    std::optional<Leader> leader;
    if (!epoch.empty() && epoch != skipped) {
      leader = current.leader;
    }
    if (!leader) {
      give_up_if_asked(store, {}, o);
      if (std::string why = watch.give_up(store); !why.empty()) {
        throw InvalidArgument(fmt::format(
            "{}: no live rank 0 started a formation within {} of a clash recorded for this "
            "group in the store (it may have met it and failed): {}",
            o.where, format_duration(kClashGrace), why));
      }
      if (o.deadline.expired()) {
        std::string why = "no formation recorded in the store";
        if (!skipped.empty()) {
          why = "the store only holds a formation whose rank 0 is gone";
          const std::string state = peek(store, epoch_key(skipped, "state"));
          if (state.rfind("clash ", 0) == 0) {
            why += "; that formation failed: " + state.substr(6);
          }
        }
        throw TimeoutError(
            fmt::format("{}: rank 0 never showed up within {} ({}); check that it was started "
                        "with the same store and run id, and its log",
                        o.where, format_duration(o.timeout), why),
            timeout_context(o, {0}));
      }
      // Wait a slice for rank 0 to record a new formation (the read above waited one already
      // when there was none); re-probe a skipped leader now and then, in case it was only slow
      // to answer.
      if (!epoch.empty()) {
        std::this_thread::sleep_for(std::min(kPollSlice, o.deadline.remaining()));
      }
      if (++slices_skipped % kReprobeSlices == 0) {
        skipped.clear();
      }
      continue;
    }
    auto skip = [&](const char* why) {
      CHORUS_INFO(init,
                  "{}: rank 0 of the recorded formation (process {} at {}) does not answer ({}); "
                  "waiting for a live rank 0 to start a new one",
                  o.where, leader->who, leader->address, why);
      skipped = epoch;
    };
    if (leader->size != o.size) {
      if (!leader_alive(*leader, o.rank, o.deadline)) {
        skip("a different world size");
        continue;
      }
      clash(
          store, epoch,
          fmt::format(
              "{}: WORLD_SIZE differs between ranks: rank 0 (process {}) has WORLD_SIZE={} but rank {} "
              "({}) has WORLD_SIZE={}; start every rank with the same WORLD_SIZE ({})",
              o.where, leader->who, leader->size, o.rank, process_identity(), o.size,
              clash_advice()));
    }
    if (const std::string why = token_clash(*leader, o); !why.empty()) {
      if (!leader_alive(*leader, o.rank, o.deadline)) {
        skip("a different job token");
        continue;
      }
      clash(store, epoch, fmt::format("{}: {}", o.where, why));
    }
    const std::string mine = claim_record(o);
    const std::string claimed =
        to_string(store.compare_set(claim_key(epoch, o.rank), {}, to_bytes(mine)));
    if (claimed != mine) {
      // Taken: by a live duplicate, or by a rank of a dead launch whose records stayed.
      if (!leader_alive(*leader, o.rank, o.deadline)) {
        skip("rank already claimed there");
        continue;
      }
      clash(store, epoch,
            fmt::format(
                "{}: two processes claim rank {} of this group: process {} and this one ({}); a "
                "duplicate RANK={}, or another job using the same store and run id; {}",
                o.where, o.rank, parse_claim(claimed).value_or(Claim{.who = "?"}).who,
                process_identity(), o.rank, clash_advice()));
    }
    // The claim is also this rank's published address. Claimed before counted: the rank that
    // completes the count finds every counted rank's claim.
    const std::int64_t joined = store.add(epoch_key(epoch, "joined"), 1);
    if (joined > o.size) {
      // The formation completed without this rank: its claim was free only because a member
      // left (destroyed its group). Wait for the next formation instead of joining a finished
      // one (whose rank 0 is leaving, or belongs to another job). Until the withdrawal, a
      // member of that formation looking up the rank that left finds this process's address;
      // it fails its handshake there instead of finding the rank gone.
      withdraw(store, epoch, o.rank);
      CHORUS_INFO(init,
                  "{}: the recorded formation is complete without this rank (a member "
                  "left it); waiting for rank 0 to start a new one",
                  o.where);
      skipped = epoch;
      continue;
    }
    const bool last = joined == o.size;
    Membership m = membership_of(epoch, *leader, o);
    if (last && !complete_formation(store, epoch, *leader, o)) {
      withdraw(store, epoch, o.rank);
      skip("checked when completing the formation");
      continue;
    }
    switch (await_state(store, m, o)) {
      case Outcome::formed:
        return m;
      case Outcome::superseded:
        withdraw(store, epoch, o.rank);
        continue;
      case Outcome::timed_out:
      case Outcome::clashed:
        break;
    }
    throw_formation_timeout(store, epoch, o, &*leader);
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
  // Read once per process: every claim and many messages name it, and each read is a system
  // call (the pid is not cached: a forked child has its own).
  static const std::string host = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
      name[0] = '?';
    }
    return std::string(name);
  }();
  return fmt::format("{}@{}", ::getpid(), host);
}

std::string process_identity() { return "process " + pid_at_host(); }

ErrorContext setup_error_context(int rank, int size, const std::string& group, Duration timeout,
                                 std::vector<int> peers) {
  ErrorContext c;
  c.rank = rank;
  c.size = size;
  c.group = group;
  c.op = "connect";
  c.peers = std::move(peers);
  c.timeout = timeout;
  return c;
}

Membership join_group(Store& store, const MembershipOptions& o) {
  if (o.size == 1) {
    Membership m;
    m.group_id = random_group_id();
    m.addresses[0] = o.local_address;
    m.host_map = "0*1";
    return m;
  }
  return o.rank == 0 ? lead(store, o) : follow(store, o);
}

std::vector<int> fetch_addresses(Store& store, Membership& m, const std::vector<int>& ranks,
                                 Deadline deadline) {
  for (;;) {
    std::vector<int> wanted;
    std::vector<std::string> keys;
    for (int r : ranks) {
      if (!m.addresses.contains(r)) {
        wanted.push_back(r);
        keys.push_back(claim_key(m.epoch, r));
      }
    }
    if (keys.empty()) {
      return {};
    }
    // Usually every one of them is there: one round trip that does not wait reads them all.
    // Otherwise the store names what is missing, and the checks below tell a rank that left
    // from a slow store.
    try {
      store_addresses(m, wanted, store.multi_get(keys, Duration::zero()));
      return {};
    } catch (const TimeoutError&) {
    }
    if (!store.check(keys)) {
      std::vector<int> left;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!store.check({keys[i]})) {
          left.push_back(wanted[i]);
        }
      }
      if (!left.empty()) {
        return left;
      }
    }
    // All present a moment ago; a wait here only means a rank left in between (look again)
    // or a slow store (up to the deadline).
    std::vector<Bytes> records;
    try {
      records = store.multi_get(keys, std::min(kAddressWait, deadline.remaining()));
    } catch (const TimeoutError&) {
      if (deadline.expired()) {
        throw;
      }
      continue;
    }
    store_addresses(m, wanted, records);
    return {};
  }
}

std::vector<std::string> host_ids(const Membership& m) {
  std::vector<std::string> ids;
  ids.reserve(static_cast<std::size_t>(m.size));
  for_each_host_run(m.host_map, m.size, [&](long host, long count) {
    ids.insert(ids.end(), static_cast<std::size_t>(count), fmt::format("h{}", host));
  });
  return ids;
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
    store.delete_key(claim_key(m.epoch, rank));
    if (store.add(epoch_key(m.epoch, "left"), 1) < m.size) {
      return;
    }
    // The last member out: nobody reads the formation's shared records any more.
    if (read_current(store).epoch == m.epoch) {
      store.delete_key(kCurrentEpochKey);
    }
    // `state` before `joined`: a rank of this namespace's next group that read `current`
    // before it was removed may still claim and count here. While `joined` stands, its count
    // comes out past the size and it moves on; once `joined` is gone, so is a "formed" state
    // that would have let it through (into a group whose members have left).
    for (const char* name :
         {"state", "joined", "gone", "missing", "timeouts", "left", kLinkCostsRecord}) {
      store.delete_key(epoch_key(m.epoch, name));
    }
  } catch (const std::exception& e) {
    CHORUS_INFO(init, "rank {}: could not remove the group's store keys: {}", rank, e.what());
  }
}

}  // namespace chorus::cpu
