// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_FAULT parsing and the FaultTransport decorator (see fault_transport.hpp).
#include "cpu/transports/fault/fault_transport.hpp"

#include <unistd.h>

#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.hpp"
#include "core/env.hpp"
#include "core/logging.hpp"

namespace chorus::cpu {
namespace {

constexpr const char* kForms =
    "accepted forms, separated by ';': rank=R:close_link=P[,after_bytes=N[K|M|G]], "
    "rank=R:stall=T[,at_seq=S] (T like 500ms or 3s), rank=R:exit_at_seq=S";

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw_error(ErrorCode::invalid_argument,
              fmt::format("CHORUS_FAULT='{}' is malformed: {}; {}; unset it to run without faults",
                          text, why, kForms));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) {
      return out;
    }
    start = at + 1;
  }
}

std::optional<std::uint64_t> parse_count(const std::string& v, bool allow_suffix) {
  if (v.empty()) {
    return std::nullopt;
  }
  std::size_t digits = 0;
  while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9') {
    ++digits;
  }
  if (digits == 0 || digits > 15) {
    return std::nullopt;
  }
  std::uint64_t n = std::stoull(v.substr(0, digits));
  const std::string suffix = v.substr(digits);
  if (suffix.empty()) {
    return n;
  }
  if (!allow_suffix || suffix.size() != 1) {
    return std::nullopt;
  }
  switch (suffix[0]) {
    case 'K':
    case 'k':
      return n << 10;
    case 'M':
    case 'm':
      return n << 20;
    case 'G':
    case 'g':
      return n << 30;
    default:
      return std::nullopt;
  }
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& text) {
  std::vector<Fault> faults;
  for (const std::string& item : split(text, ';')) {
    if (item.empty()) {
      continue;
    }
    const std::size_t colon = item.find(':');
    if (item.rfind("rank=", 0) != 0 || colon == std::string::npos) {
      bad(text, fmt::format("'{}' does not start with rank=R:", item));
    }
    Fault f;
    const auto rank = parse_count(item.substr(5, colon - 5), false);
    if (!rank || *rank > 1'000'000) {
      bad(text, fmt::format("'{}' has no valid rank", item));
    }
    f.rank = static_cast<int>(*rank);
    bool have_action = false;
    for (const std::string& kv : split(item.substr(colon + 1), ',')) {
      const std::size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq);
      const std::string value = eq == std::string::npos ? std::string() : kv.substr(eq + 1);
      const bool first = !have_action;
      if (first && key == "close_link") {
        const auto peer = parse_count(value, false);
        if (!peer || *peer > 1'000'000 || static_cast<int>(*peer) == f.rank) {
          bad(text, fmt::format("close_link needs another rank, got '{}'", value));
        }
        f.kind = Fault::Kind::close_link;
        f.peer = static_cast<int>(*peer);
      } else if (first && key == "stall") {
        const auto d = env::parse_duration(value);
        if (!d || *d <= Duration::zero()) {
          bad(text, fmt::format("stall needs a positive duration, got '{}'", value));
        }
        f.kind = Fault::Kind::stall;
        f.stall = *d;
      } else if (first && key == "exit_at_seq") {
        const auto seq = parse_count(value, false);
        if (!seq || *seq == 0) {
          bad(text, fmt::format("exit_at_seq needs an op sequence number >= 1, got '{}'", value));
        }
        f.kind = Fault::Kind::exit;
        f.at_seq = *seq;
      } else if (!first && key == "after_bytes" && f.kind == Fault::Kind::close_link) {
        const auto n = parse_count(value, true);
        if (!n) {
          bad(text, fmt::format("after_bytes needs a byte count, got '{}'", value));
        }
        f.after_bytes = *n;
      } else if (!first && key == "at_seq" && f.kind == Fault::Kind::stall) {
        const auto seq = parse_count(value, false);
        if (!seq || *seq == 0) {
          bad(text, fmt::format("at_seq needs an op sequence number >= 1, got '{}'", value));
        }
        f.at_seq = *seq;
      } else {
        bad(text, fmt::format("'{}' is not expected in '{}'", kv, item));
      }
      have_action = true;
    }
    if (!have_action) {
      bad(text, fmt::format("'{}' names no fault", item));
    }
    faults.push_back(f);
  }
  if (faults.empty()) {
    bad(text, "it names no fault");
  }
  return faults;
}

std::string faults_outside_group(const std::string& spec, const std::vector<Fault>& faults,
                                 int size) {
  std::vector<std::string> outside;
  for (const Fault& f : faults) {
    if (f.rank >= size) {
      outside.push_back(fmt::format("rank={}", f.rank));
    } else if (f.peer >= size) {
      outside.push_back(fmt::format("rank={}:close_link={}", f.rank, f.peer));
    }
  }
  if (outside.empty()) {
    return {};
  }
  return fmt::format(
      "CHORUS_FAULT='{}': {} {} a rank outside this group of {} rank{} (ranks 0..{}), so {} "
      "nothing here; R and P count within each tcp group: pick ranks below {}",
      spec, fmt::join(outside, ", "), outside.size() == 1 ? "names" : "name", size,
      size == 1 ? "" : "s", size - 1, outside.size() == 1 ? "it injects" : "they inject", size);
}

std::vector<Fault> faults_for(int rank, int size) {
  std::vector<Fault> mine;
  if (const auto spec = env::get("CHORUS_FAULT")) {
    const std::vector<Fault> all = parse_faults(*spec);
    // Said once per group, by its rank 0: every rank parses the same variable.
    if (const std::string outside = faults_outside_group(*spec, all, size);
        rank == 0 && !outside.empty()) {
      CHORUS_WARN(coll, "{}", outside);
    }
    for (const Fault& f : all) {
      if (f.rank == rank && f.peer < size) {
        mine.push_back(f);
      }
    }
    if (!mine.empty()) {
      CHORUS_WARN(coll, "CHORUS_FAULT='{}': rank {} will inject {} fault(s)", *spec, rank,
                  mine.size());
    }
  }
  return mine;
}

FaultTransport::FaultTransport(int rank, std::unique_ptr<EngineTransport> inner,
                               std::vector<Fault> faults)
    : ForwardingTransport(std::move(inner)),
      rank_(rank),
      faults_(std::move(faults)),
      fired_(faults_.size(), false) {}

void FaultTransport::count_sent(int peer, std::size_t bytes) {
  if (static_cast<std::size_t>(peer) >= sent_.size()) {
    sent_.resize(static_cast<std::size_t>(peer) + 1, 0);
  }
  sent_[static_cast<std::size_t>(peer)] += bytes;
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    if (fired_[i] || f.kind != Fault::Kind::close_link || f.peer != peer ||
        sent_[static_cast<std::size_t>(peer)] < f.after_bytes) {
      continue;
    }
    fired_[i] = true;
    inner_->sever(peer);
    TransportEvent ev;
    ev.kind = TransportEvent::Kind::local_failure;
    ev.code = ErrorCode::aborted;
    ev.peer = peer;
    ev.error = fmt::format(
        "CHORUS_FAULT closed this rank's connections to rank {} after {} bytes sent to it "
        "(a rehearsed failure of rank {}); unset CHORUS_FAULT to run without it",
        peer, sent_[static_cast<std::size_t>(peer)], rank_);
    pending_.push_back(std::move(ev));
  }
}

void FaultTransport::post_send(int peer, const void* data, std::size_t bytes, std::uint64_t token) {
  inner_->post_send(peer, data, bytes, token);
  count_sent(peer, bytes);
}

void FaultTransport::send_p2p(int peer, std::uint32_t tag, const void* data, std::size_t bytes,
                              std::uint64_t token) {
  inner_->send_p2p(peer, tag, data, bytes, token);
  count_sent(peer, bytes);
}

void FaultTransport::send_control(int peer, FrameType type, std::vector<std::uint8_t> payload) {
  const std::size_t bytes = payload.size();
  inner_->send_control(peer, type, std::move(payload));
  count_sent(peer, bytes);
}

void FaultTransport::op_starting(const OpSignature& sig) noexcept {
  const std::uint64_t seq = sig.seq;
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    if (fired_[i] || f.at_seq != seq || f.kind == Fault::Kind::close_link) {
      continue;
    }
    fired_[i] = true;
    if (f.kind == Fault::Kind::stall) {
      // The rehearsed fault itself: before posting anything of the op, this rank neither
      // reads nor writes, as if stopped.
      CHORUS_WARN(coll, "CHORUS_FAULT: rank {} stalls its progress for {} ms at op seq {}", rank_,
                  std::chrono::duration_cast<std::chrono::milliseconds>(f.stall).count(), seq);
      std::this_thread::sleep_for(f.stall);
    } else {
      exit_ = true;
    }
  }
  inner_->op_starting(sig);
}

void FaultTransport::poll(Deadline until, std::vector<std::uint64_t>& completed,
                          std::vector<TransportEvent>& events) {
  if (exit_) {
    // The op's first transfers are posted (some written): the peers see a rank die mid-op.
    CHORUS_WARN(coll, "CHORUS_FAULT: rank {} exits (status {}) in the middle of an op", rank_,
                kFaultExitStatus);
    std::fflush(nullptr);
    ::_exit(kFaultExitStatus);
  }
  inner_->poll(pending_.empty() ? until : Deadline::after(Duration::zero()), completed, events);
  for (auto& ev : pending_) {
    events.push_back(std::move(ev));
  }
  pending_.clear();
}

}  // namespace chorus::cpu
