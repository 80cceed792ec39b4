// SPDX-License-Identifier: BSD-3-Clause
// LinkConnector: connections accepted on the rank's listener (see link_connector.hpp). Reads
// and checks the hello and nonce (probes and crossing hellos close quietly), decides a crossing
// (decide), answers with this rank's hello and proof, and checks the dialer's proof; strangers
// are dropped with a logged reason.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "cpu/transports/socket/link_handshakes.hpp"

namespace chorus::cpu {
namespace {

// Accepted connections that have not finished their handshake, beyond which the oldest is
// dropped: a flood of strangers costs bounded memory and descriptors.
constexpr std::size_t kMaxPendingIncoming = 512;
// After a failed accept (out of descriptors) the listener is left alone for this long.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

}  // namespace

void LinkConnector::accept_all() {
  for (;;) {
    net::AcceptResult a = listener_.accept();
    if (!a.io.ok()) {
      if (!a.io.would_block()) {
        CHORUS_WARN(init, "{}: accept on {} failed: {}", o_.where, o_.local_address,
                    a.io.describe());
        accept_paused_ = Deadline::after(kAcceptPause);
      }
      return;
    }
    if (incoming_.size() >= kMaxPendingIncoming) {
      auto oldest = std::find_if(incoming_.begin(), incoming_.end(),
                                 [](const auto& in) { return !in->done; });
      if (oldest != incoming_.end()) {
        CHORUS_WARN(init,
                    "{}: dropped a connection from {} that had not finished its handshake, to "
                    "make room ({} pending)",
                    o_.where, (*oldest)->from, incoming_.size());
        (*oldest)->done = true;
        (*oldest)->sock.close();
      }
      std::erase_if(incoming_, [](const auto& in) { return in->done; });
    }
    auto in = std::make_unique<Incoming>();
    in->sock = std::move(a.socket);
    in->from = a.peer.to_string();
    in->deadline = Deadline::after(o_.hello_timeout);
    incoming_.push_back(std::move(in));
  }
}

void LinkConnector::step_incoming(Incoming& in) {
  auto drop = [&](const std::string& why) {
    CHORUS_WARN(init, "{}: dropped a connection from {}: {}", o_.where, in.from, why);
    in.done = true;
    in.sock.close();
  };
  if (in.parked) {
    std::uint8_t byte;
    const net::IoResult r = in.sock.read(&byte, 1);
    if (!r.would_block()) {
      in.done = true;  // closed (an abandoned dial), or bytes out of turn
      in.sock.close();
    }
    return;
  }
  if (in.peer < 0) {
    // A probe is a bare hello: read the hello first, the nonce only from a real connection.
    const std::size_t want = in.got < kHelloBytes ? kHelloBytes : kOpenBytes;
    const net::IoResult r = in.sock.read(in.open.data() + in.got, want - in.got);
    if (r.would_block()) {
      return;
    }
    if (!r.ok()) {
      drop(fmt::format("{} after {} of the {} handshake bytes",
                       r.closed() ? "closed" : r.describe(), in.got, kOpenBytes));
      return;
    }
    in.got += r.bytes;
    if (in.got < kHelloBytes) {
      return;
    }
    Hello h;
    const std::string bad = check_hello(in.open.data(), membership_.group_id, o_.rank, kAnySource,
                                        o_.size, static_cast<std::uint16_t>(o_.channels), h);
    if (!bad.empty()) {
      drop("refused: " + bad);
      return;
    }
    if (h.channel == kProbeChannel || h.channel == kCrossingChannel) {
      in.done = true;  // a rank checking that we are alive (membership.cpp): quietly
      in.sock.close();
      return;
    }
    if (in.got < kOpenBytes) {
      return;
    }
    decide(in, h);
    return;
  }
  const net::IoResult r =
      in.sock.read(in.proof.data() + in.proof_got, in.proof.size() - in.proof_got);
  if (r.would_block()) {
    return;
  }
  if (!r.ok()) {
    drop(fmt::format("rank {} closed the connection before its membership proof", in.peer));
    return;
  }
  in.proof_got += r.bytes;
  if (in.proof_got < in.proof.size()) {
    return;
  }
  if (!net::equal_macs(in.proof, in.expected)) {
    drop(
        fmt::format("it claims to be rank {} but sent a wrong membership proof: not a member of "
                    "this formation (a replayed or forged handshake, or a rank whose "
                    "CHORUS_STORE_TOKEN differs from this one's)",
                    in.peer));
    return;
  }
  const auto up = static_cast<std::size_t>(in.peer);
  auto& slots = accepted_[up];
  if (slots.empty()) {
    slots.resize(static_cast<std::size_t>(o_.channels));
  }
  if (slots[in.channel].valid() || state_[up] != State::accepting) {
    drop(fmt::format("a second connection claiming rank {} channel {}", in.peer, in.channel));
    return;
  }
  slots[in.channel] = std::move(in.sock);
  in.done = true;
  if (std::all_of(slots.begin(), slots.end(), [](const net::Socket& s) { return s.valid(); })) {
    std::vector<net::Socket> sockets = std::move(slots);
    slots.clear();
    deliver(in.peer, std::move(sockets));
  }
}

// A verified hello and nonce from rank h.src: take its link, or tell it ours wins.
void LinkConnector::decide(Incoming& in, const Hello& h) {
  const int peer = static_cast<int>(h.src);
  const auto up = static_cast<std::size_t>(peer);
  const State s = state_[up];
  if (s == State::up) {
    in.parked = true;
    in.parked_hello = h;
    return;
  }
  if (s == State::failed || (s == State::dialing && peer > o_.rank)) {
    // Our own dial to that (higher) rank is under way, or the link exists: it keeps ours.
    const auto crossing = encode_hello(
        {membership_.group_id, static_cast<std::uint32_t>(o_.rank), h.src, kCrossingChannel,
         static_cast<std::uint16_t>(o_.channels), static_cast<std::uint32_t>(o_.size)});
    (void)write_whole(in.sock, crossing.data(), crossing.size());
    in.done = true;
    in.sock.close();
    return;
  }
  if (s == State::dialing) {
    abandon_dial(peer);  // the lower rank's dial wins
  }
  state_[up] = State::accepting;
  const Open mine =
      make_open({membership_.group_id, static_cast<std::uint32_t>(o_.rank), h.src, h.channel,
                 static_cast<std::uint16_t>(o_.channels), static_cast<std::uint32_t>(o_.size)});
  const net::Mac proof = accept_proof(membership_.secret, in.open.data(), mine.data());
  std::array<std::uint8_t, kAnswerBytes> answer{};
  std::copy(mine.begin(), mine.end(), answer.begin());
  std::copy(proof.begin(), proof.end(), answer.begin() + kOpenBytes);
  if (!write_whole(in.sock, answer.data(), answer.size())) {
    CHORUS_WARN(init, "{}: rank {} ({}) closed its connection during the handshake", o_.where, peer,
                in.from);
    in.done = true;
    in.sock.close();
    return;
  }
  in.expected = connect_proof(membership_.secret, in.open.data(), mine.data());
  in.peer = peer;
  in.channel = h.channel;
  in.deadline = Deadline::after(o_.hello_timeout);
}

}  // namespace chorus::cpu
