// SPDX-License-Identifier: BSD-3-Clause
// FailureReport: the wording of the engine's failures (see failure_report.hpp).
#include "cpu/engine/failure_report.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/format.hpp"

namespace chorus::cpu {
namespace {

std::string left_group(const std::string& peer, const std::string& detail) {
  return fmt::format(
      "{} left the group (destroyed it) while this rank still needed it: {}; the ranks issued "
      "different numbers of collectives",
      peer, detail);
}

}  // namespace

std::exception_ptr make_error(ErrorCode code, const std::string& message, ErrorContext ctx) {
  try {
    throw_error(code, message, std::move(ctx));
  } catch (...) {
    return std::current_exception();
  }
}

AbortNotice notice_of(const std::exception_ptr& error, int root_rank, std::string root_message) {
  AbortNotice notice;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    notice.code = static_cast<int>(e.code());
    notice.seq = e.context().seq;
    notice.peers = e.context().peers;
    notice.message = e.what();
  } catch (const std::exception& e) {
    notice.code = static_cast<int>(ErrorCode::internal);
    notice.message = e.what();
  }
  notice.root_rank = root_rank;
  notice.root_message = root_message.empty() ? notice.message : std::move(root_message);
  return notice;
}

FailureReport::FailureReport(int rank, int size, std::string group,
                             const EngineTransport& transport)
    : rank_(rank), size_(size), group_(std::move(group)), transport_(transport) {
  addresses_.resize(static_cast<std::size_t>(size_));
  addresses_[static_cast<std::size_t>(rank_)] = transport_.local_address();
}

// Links are made on demand, so a peer's address is learned late: asked again until known.
const std::string& FailureReport::peer_address(int rank) const {
  std::string& known = addresses_[static_cast<std::size_t>(rank)];
  if (known.empty()) {
    known = transport_.address(rank);
  }
  return known;
}

std::string FailureReport::rank_name(int rank) const {
  const std::string& address = peer_address(rank);
  return address.empty() ? fmt::format("rank {}", rank)
                         : fmt::format("rank {} ({})", rank, address);
}

std::string FailureReport::prefix(const Op* op) const {
  return fmt::format("{} {}", op ? op->what() : std::string("tcp group"),
                     format_on_rank(rank_, size_, group_));
}

ErrorContext FailureReport::context(const Op* op, std::vector<int> peers) const {
  ErrorContext c;
  c.rank = rank_;
  c.size = size_;
  c.group = group_;
  if (op) {
    c.op = op->call.name;
    c.seq = op->call.seq;
    c.bytes = op->bytes;
    c.timeout = op->call.timeout;
    c.elapsed = std::chrono::duration_cast<Duration>(Clock::now() -
                                                     (op->call.deadline.when() - op->call.timeout));
  }
  if (!peers.empty()) {
    c.peer_address = peer_address(peers.front());
  }
  c.peers = std::move(peers);
  return c;
}

std::exception_ptr FailureReport::error(ErrorCode code, const Op* op, const std::string& what,
                                        std::vector<int> peers) const {
  return make_error(code, fmt::format("{}: {}", prefix(op), what), context(op, std::move(peers)));
}

std::exception_ptr FailureReport::mismatch(const Op& op, int peer, const std::string& what) const {
  return make_error(
      ErrorCode::invalid_argument,
      fmt::format("{}: collective mismatch with {}: {}; every rank must issue the same "
                  "collectives, with the same count, dtype, op and root, in the same order",
                  prefix(&op), rank_name(peer), what),
      context(&op, {peer}));
}

std::exception_ptr FailureReport::peer_left(const Op* op, int peer,
                                            const std::string& detail) const {
  return error(ErrorCode::network, op, left_group(rank_name(peer), detail), {peer});
}

std::exception_ptr FailureReport::peer_failed(const Op* op, const TransportEvent& ev) const {
  const std::string what =
      ev.left ? left_group(rank_name(ev.peer), ev.error)
              : fmt::format(
                    "lost the connection to {}: {}; check that rank's log for why it "
                    "stopped",
                    rank_name(ev.peer), ev.error);
  ErrorContext c = context(op, {ev.peer});
  c.os_error = ev.os_error;
  return make_error(ErrorCode::network, fmt::format("{}: {}", prefix(op), what), c);
}

std::exception_ptr FailureReport::silent_peer(const Op* op, int peer, Duration silent,
                                              Duration peer_timeout) const {
  return make_error(
      ErrorCode::network,
      fmt::format("{}: no traffic or heartbeat from {} for {} (peer timeout {}): its host is down, "
                  "the network between the ranks is partitioned, or the process is stopped (a "
                  "debugger, SIGSTOP); to pause ranks on purpose, raise CHORUS_PEER_TIMEOUT (or "
                  "TcpGroupOptions::peer_timeout), or set it to 0 to turn liveness checks off",
                  prefix(op), rank_name(peer), format_duration(silent),
                  format_duration(peer_timeout)),
      context(op, {peer}));
}

std::exception_ptr FailureReport::timeout(const Op& op, std::string waiting,
                                          const std::vector<int>& direct,
                                          const std::vector<ProbeFinding>& findings, Duration grace,
                                          const EngineTransport& transport,
                                          std::vector<int>& culprits) const {
  std::string details;
  for (std::size_t i = 0; i < direct.size(); ++i) {
    waiting += (i ? ", " : "") + rank_name(direct[i]);
  }
  for (int p : direct) {
    if (!transport.peer_connected(p)) {
      // Its link was asked for when this op needed it, and any live process's link connector
      // answers at once, whatever its program is doing.
      details += fmt::format(
          "; {} has not completed a link with this rank: its process is stopped, hung or "
          "overloaded",
          rank_name(p));
    }
  }
  culprits.clear();
  for (const ProbeFinding& f : findings) {
    culprits.push_back(f.peer);
    if (!f.answered) {
      details += fmt::format(
          "; {} did not answer a status probe within {}: it is stopped, hung or overloaded",
          rank_name(f.peer), format_duration(grace));
    } else {
      details += fmt::format("; {} has not issued this op yet (its last collective is seq {})",
                             rank_name(f.peer), f.issued_seq);
    }
  }
  if (culprits.empty()) {
    culprits = direct;
  }
  const std::string message = fmt::format(
      "{} timed out after {}{}{}; check the named ranks (log, stack), or raise the timeout "
      "(per-call option, GroupOptions::timeout or CHORUS_TIMEOUT) if the op is legitimately slow",
      prefix(&op), format_duration(op.call.timeout), waiting, details);
  return make_error(ErrorCode::timeout, message, context(&op, culprits));
}

std::exception_ptr FailureReport::from_news(const Op* op, int from, const AbortNotice& n, bool left,
                                            int& root, std::string& root_message) const {
  root = valid_rank(n.root_rank) ? n.root_rank : from;
  root_message = valid_rank(n.root_rank) && !n.root_message.empty() ? n.root_message : n.message;
  const std::string how = left ? "left the group" : "aborted the group";
  std::string what;
  if (root == from || root == rank_) {
    // The sender is the root, or this rank is (its own timeout culprit): the sender's words.
    what = fmt::format("{} failed and {}: {}", rank_name(from), how, n.message);
  } else {
    what = fmt::format("the group failed because of {}: {}; {} {} because of it", rank_name(root),
                       root_message, rank_name(from), how);
  }
  std::vector<int> peers = n.peers;
  if (std::find(peers.begin(), peers.end(), root) == peers.end()) {
    peers.insert(peers.begin(), root);
  }
  const int code = n.code;
  const auto error_code = code >= static_cast<int>(ErrorCode::invalid_argument) &&
                                  code <= static_cast<int>(ErrorCode::internal)
                              ? static_cast<ErrorCode>(code)
                              : ErrorCode::network;
  return error(error_code, op, what, std::move(peers));
}

}  // namespace chorus::cpu
