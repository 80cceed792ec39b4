// SPDX-License-Identifier: BSD-3-Clause
// See admission.hpp for the keys and why each is written the way it is.
#include "core/admission.hpp"

#include <charconv>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"

namespace chorus::detail {
namespace {

constexpr const char* kTickets = "tickets";
constexpr const char* kAdmitted = "admitted";
constexpr const char* kEpochs = "epochs";
constexpr const char* kClosed = "closed";
constexpr const char* kWithdrawn = "withdrawn";
constexpr const char* kUnarrived = "unarrived";

std::string seat_key(std::int64_t ticket) { return fmt::format("seat/{}", ticket); }
std::string arrived_key(std::int64_t ticket) { return fmt::format("arrived/{}", ticket); }
std::string info_key(std::int64_t epoch) { return grown_group_namespace(epoch) + "/info"; }

// The leading decimal number of `text` from `pos` (advanced past it and one space); nullopt if
// there is none. The lobby is shared with the job: what is not ours to parse is an error, never
// a guess.
std::optional<std::int64_t> take_number(const std::string& text, std::size_t& pos) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), value);
  if (ec != std::errc() || value < 0) {
    return std::nullopt;
  }
  pos = static_cast<std::size_t>(end - text.data());
  if (pos < text.size() && text[pos] == ' ') {
    ++pos;
  }
  return value;
}

Error malformed(const std::string& lobby_name, const std::string& key, const std::string& value) {
  return Error(ErrorCode::store,
               fmt::format("the lobby of group [{}] holds a malformed '{}' ({:?}): another "
                           "program writes to this job's store keys",
                           lobby_name, key, value.substr(0, 64)),
               ErrorContext{.group = lobby_name, .op = "join"});
}

GrownGroup read_group_info(Store& lobby, const std::string& lobby_name, std::int64_t epoch,
                           Duration wait) {
  const std::string key = info_key(epoch);
  const std::string text = to_string(lobby.get(key, wait));
  std::size_t pos = 0;
  const auto size = take_number(text, pos);
  const auto timeout_ms = take_number(text, pos);
  if (!size || !timeout_ms || *size < 2 || *size > (1 << 20) || pos >= text.size()) {
    throw malformed(lobby_name, key, text);
  }
  return GrownGroup{.epoch = epoch,
                    .size = static_cast<int>(*size),
                    .timeout = Duration(*timeout_ms),
                    .name = text.substr(pos)};
}

Error refused(Store& lobby, const std::string& lobby_name) {
  std::string reason = to_string(lobby.get(kClosed));
  return Error(ErrorCode::aborted,
               fmt::format("join of group [{}]: its members stopped admitting new ranks ({}); "
                           "this process has nothing to join",
                           lobby_name, reason.substr(0, 512)),
               ErrorContext{.group = lobby_name, .op = "join"});
}

}  // namespace

std::string grown_group_namespace(std::int64_t epoch) { return fmt::format("grow{}", epoch); }

std::string grown_group_name(const std::string& lobby_name, std::int64_t epoch) {
  return lobby_name + "/" + grown_group_namespace(epoch);
}

GrownGroup admit_joiners(Store& lobby, const std::string& lobby_name, int members, Duration wait,
                         const std::string& name, Duration timeout) {
  GrownGroup none{.size = members};
  if (lobby.check({kClosed})) {
    return none;
  }
  const std::int64_t admitted = lobby.add(kAdmitted, 0);
  std::int64_t tickets = lobby.add(kTickets, 0);
  // Within `wait`, the first unhandled ticket's arrival is waited for, whether or not the ticket
  // is taken yet: a joiner takes its ticket and then writes its arrival, and one caught between
  // the two is let in here rather than seated "unarrived" below. A ticket that never arrives (a
  // phantom) costs one `wait`, once: it is then seated "unarrived" and handled.
  if (wait > Duration::zero() && !lobby.check({arrived_key(admitted + 1)})) {
    try {
      lobby.wait({arrived_key(admitted + 1)}, wait);
    } catch (const TimeoutError&) {
      // Nobody came, or only a phantom.
    }
    tickets = lobby.add(kTickets, 0);
  }
  if (tickets == admitted) {
    return none;
  }
  const std::int64_t epoch = lobby.add(kEpochs, 1);
  std::vector<std::string> arrivals;
  for (std::int64_t t = admitted + 1; t <= tickets; ++t) {
    arrivals.push_back(arrived_key(t));
  }
  const bool all_arrived = lobby.check(arrivals);  // usually: one round trip for them all
  int size = members;
  for (std::int64_t t = admitted + 1; t <= tickets; ++t) {
    // A ticket without its arrival record was taken by no joiner (by hand, or by a process that
    // died before writing it): seating it would cost the members join_timeout. A joiner caught
    // between its two writes finds "unarrived" and takes a new ticket.
    const bool arrived = all_arrived || lobby.check({arrived_key(t)});
    const std::string seat = arrived ? fmt::format("{} {}", epoch, size) : kUnarrived;
    // A joiner that gave up (or a closed lobby) wrote its seat first: skip it.
    if (to_string(lobby.compare_set(seat_key(t), Bytes{}, to_bytes(seat))) == seat && arrived) {
      ++size;
    }
  }
  lobby.add(kAdmitted, tickets - admitted);
  if (size == members) {
    return none;
  }
  GrownGroup grown{.epoch = epoch,
                   .size = size,
                   .timeout = timeout,
                   .name = name.empty() ? grown_group_name(lobby_name, epoch) : name};
  lobby.set(info_key(epoch),
            to_bytes(fmt::format("{} {} {}", grown.size, grown.timeout.count(), grown.name)));
  return grown;
}

Seat wait_for_seat(Store& lobby, const std::string& lobby_name, Duration wait) {
  const Deadline deadline = Deadline::after(wait);
  std::int64_t ticket = 0;
  std::string key;
  std::string seat = kUnarrived;
  while (seat == kUnarrived) {  // admitted between the ticket and its arrival: again
    ticket = lobby.add(kTickets, 1);
    lobby.set(arrived_key(ticket), to_bytes("1"));
    key = seat_key(ticket);
    if (lobby.check({kClosed})) {
      seat = to_string(lobby.compare_set(key, Bytes{}, to_bytes(kClosed)));
      continue;
    }
    try {
      lobby.wait({key}, deadline.remaining());
      seat = to_string(lobby.get(key));
    } catch (const TimeoutError&) {
      seat = to_string(lobby.compare_set(key, Bytes{}, to_bytes(kWithdrawn)));
      if (seat == kWithdrawn) {
        throw TimeoutError(
            fmt::format("join of group [{}]: no member called grow() within {} (ticket {}); "
                        "check that the job still runs and calls grow() at its step boundaries, "
                        "or raise JoinOptions::wait",
                        lobby_name, format_duration(wait), ticket),
            ErrorContext{.group = lobby_name, .op = "join"});
      }
    }
  }
  if (seat == kClosed) {
    throw refused(lobby, lobby_name);
  }
  std::size_t pos = 0;
  const auto epoch = take_number(seat, pos);
  const auto rank = take_number(seat, pos);
  if (!epoch || !rank || pos != seat.size()) {
    throw malformed(lobby_name, key, seat);
  }
  Seat out{.group = read_group_info(lobby, lobby_name, *epoch, wait),
           .rank = static_cast<int>(*rank)};
  if (out.rank >= out.group.size) {
    throw malformed(lobby_name, key, seat);
  }
  return out;
}

void give_up_grown(Store& lobby, std::int64_t epoch, const std::string& why) noexcept {
  try {
    lobby.compare_set(grown_group_namespace(epoch) + "/given_up", Bytes{}, to_bytes(why));
  } catch (...) {
    // The store is gone too: the joiners find out at their join_timeout.
  }
}

std::string grown_given_up(Store& lobby, std::int64_t epoch) {
  const std::string key = grown_group_namespace(epoch) + "/given_up";
  return lobby.check({key}) ? to_string(lobby.get(key)) : std::string();
}

void close_lobby(Store& lobby, const std::string& reason) {
  lobby.set(kClosed, to_bytes(reason.empty() ? std::string("no reason given") : reason));
  // Every ticket not yet handled: its joiner is waiting on its seat.
  const std::int64_t tickets = lobby.add(kTickets, 0);
  for (std::int64_t t = lobby.add(kAdmitted, 0) + 1; t <= tickets; ++t) {
    lobby.compare_set(seat_key(t), Bytes{}, to_bytes(kClosed));
  }
}

}  // namespace chorus::detail
