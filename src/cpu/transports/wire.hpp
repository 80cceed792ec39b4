// SPDX-License-Identifier: BSD-3-Clause
// Frames of the control channel (one socket per peer pair, next to the data sockets):
// tagged point-to-point payloads, and the messages that make failures visible everywhere
// (abort notices, goodbyes, status probes). A frame is a 16-byte header {type u32, tag u32,
// length u64} then `length` payload bytes, all little-endian. Pure encode/decode functions.
#pragma once

#include "core/private.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::cpu {

enum class FrameType : std::uint32_t {
  p2p = 1,             // tag = user tag; payload = the tensor bytes
  abort = 2,           // the sender's group failed; payload = AbortNotice
  goodbye = 3,         // the sender destroys its group; payload = Goodbye
  status_request = 4,  // payload = u64 seq the requester timed out on
  status_reply = 5,    // payload = StatusReply
  p2p_more = 6,        // tag = the open message's tag; payload = its next chunk
  heartbeat = 7,       // empty: the sender's progress thread is alive (peer liveness)
  // Closing an idle link (CHORUS_MAX_PEER_SOCKETS). The asker sends how many collective
  // messages it has sent and received on the pair (u64 each); the peer agrees only if it is
  // idle too and its counts mirror them, so nothing is in flight either way. Both ends then
  // close, and the next op that needs the pair links it again.
  link_release = 8,
  link_release_ok = 9,
  link_release_no = 10,
};
// A tagged message of L bytes travels as one `p2p` frame whose header says L and whose body is
// the first min(L, kP2pChunkBytes) bytes, then `p2p_more` frames of at most kP2pChunkBytes each
// until L bytes have come. Control frames may come between the chunks (never other tagged
// messages), so an abort notice or a status reply waits for at most one chunk however large
// the tagged messages queued ahead of it are.
inline constexpr std::size_t kP2pChunkBytes = 256 * 1024;
inline constexpr std::size_t kFrameHeaderBytes = 16;
inline constexpr std::uint64_t kMaxControlPayload = 1 << 20;  // non-p2p frames

struct FrameHeader {
  FrameType type = FrameType::p2p;
  std::uint32_t tag = 0;
  std::uint64_t length = 0;
};
std::array<std::uint8_t, kFrameHeaderBytes> encode_header(const FrameHeader& h) noexcept;
FrameHeader decode_header(const std::uint8_t* bytes) noexcept;

// Why a group failed. A rank that fails because of news from another rank forwards the root
// cause unchanged (root_rank, root_message), so every survivor can name the rank where the
// failure began, whatever order the news reaches it in.
struct AbortNotice {
  int code = 0;              // ErrorCode of the original error
  std::uint64_t seq = 0;     // op it happened in (0: none)
  int root_rank = -1;        // the rank whose failure started it (-1: unknown)
  std::vector<int> peers;    // ranks it implicated
  std::string message;       // the sender's what()
  std::string root_message;  // what the rank that first saw the failure said
};
std::vector<std::uint8_t> encode(const AbortNotice& n);
std::optional<AbortNotice> decode_abort(const std::vector<std::uint8_t>& payload);

// A rank destroying its group. `cause` is set when its group had failed: it leaves because of
// that failure, not because the program ended early.
struct Goodbye {
  std::uint64_t last_seq = 0;
  std::optional<AbortNotice> cause;
};
std::vector<std::uint8_t> encode(const Goodbye& g);
std::optional<Goodbye> decode_goodbye(const std::vector<std::uint8_t>& payload);

struct StatusReply {
  std::uint64_t issued_seq = 0;   // last collective the peer's user issued
  std::uint64_t running_seq = 0;  // collective its engine is running (0: idle)
};
std::vector<std::uint8_t> encode(const StatusReply& s);
std::optional<StatusReply> decode_status(const std::vector<std::uint8_t>& payload);

std::vector<std::uint8_t> encode_u64(std::uint64_t v);
std::optional<std::uint64_t> decode_u64(const std::vector<std::uint8_t>& payload);

}  // namespace chorus::cpu
