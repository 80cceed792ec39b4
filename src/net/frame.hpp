// SPDX-License-Identifier: BSD-3-Clause
// Length-prefixed frames: a 4-byte little-endian payload length, then the payload. FrameReader
// parses them incrementally from partial reads with a size limit; OutputQueue buffers what a
// non-blocking socket could not take yet.
//
// Usage (event loop side):
//   net::FrameReader in(max_frame_bytes);
//   net::IoResult r = in.read_from(sock);          // one read() into the internal buffer
//   std::span<const std::uint8_t> frame;
//   while (in.next(frame) == net::FrameReader::Status::frame) { handle(frame); }  // valid until
//   next()
//   // Status::too_large: the peer announced more than the limit (in.announced() says how much)
//   net::OutputQueue out;  out.push(net::frame_bytes(payload));  net::IoResult w = out.flush(sock);
// Usage (encoding): std::vector<uint8_t> buf; size_t at = net::begin_frame(buf); ...append...;
//   net::end_frame(buf, at);   // patches the length in place
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "net/socket.hpp"

namespace chorus::net {

inline constexpr std::size_t kFrameHeaderBytes = 4;

// Reserves a length header at the end of buf; returns its offset for end_frame().
std::size_t begin_frame(std::vector<std::uint8_t>& buf);
// Writes the payload length (bytes appended since begin_frame) into the header.
void end_frame(std::vector<std::uint8_t>& buf, std::size_t header_offset);
// A whole frame (header + payload) for `payload`.
std::vector<std::uint8_t> frame_bytes(std::span<const std::uint8_t> payload);

void put_u32(std::uint8_t* p, std::uint32_t v) noexcept;
std::uint32_t get_u32(const std::uint8_t* p) noexcept;

// Incremental frame parser with a per-frame size limit. Not thread-safe.
class FrameReader {
 public:
  enum class Status { need_more, frame, too_large };
  static constexpr std::size_t kReadChunk = 64 * 1024;  // most bytes one read_from() takes
  explicit FrameReader(std::size_t max_frame_bytes) : max_frame_(max_frame_bytes) {}

  // Reads once from the socket (up to 64 KiB). The buffer grows only by the bytes received, so
  // memory follows what the peer sent, never the length it announced.
  IoResult read_from(Socket& socket);
  // Appends bytes received by other means.
  void feed(std::span<const std::uint8_t> bytes);
  // Extracts the next complete frame payload. The span stays valid until the next call of
  // next(), pop(), read_from() or feed().
  Status next(std::span<const std::uint8_t>& payload);
  // Like next() but leaves the frame buffered; pop() then consumes it. Lets a server look at a
  // request and keep it for later when it cannot afford the reply yet.
  Status peek(std::span<const std::uint8_t>& payload);
  void pop() noexcept;
  // A complete frame (or a too-large header) is buffered: reading more would only grow memory.
  bool frame_ready() const noexcept;
  // Consumes raw bytes ahead of framing (e.g. a fixed-size handshake). False if fewer buffered.
  bool take_raw(std::uint8_t* out, std::size_t n);

  std::size_t buffered() const noexcept { return end_ - start_; }
  // Bytes of memory the buffer holds (for memory budgets).
  std::size_t footprint() const noexcept { return buf_.capacity(); }
  // True while a frame has started but is incomplete (header or payload partially received).
  bool mid_frame() const noexcept { return buffered() > 0; }
  std::size_t announced() const noexcept { return announced_; }  // last header's length
  std::size_t max_frame_bytes() const noexcept { return max_frame_; }
  // Releases buffer memory when idle (many idle connections must stay cheap).
  void shrink_if_idle() noexcept;

 private:
  void compact();
  std::size_t max_frame_;
  std::vector<std::uint8_t> buf_;
  std::size_t start_ = 0;  // first unconsumed byte
  std::size_t end_ = 0;    // one past the last received byte
  std::size_t announced_ = 0;
};

// Bytes waiting to be written to a non-blocking socket, sent with writev. Small writes are
// coalesced into chunks of up to kCoalesceBytes, so that the replies of one turn leave in one
// write from one buffer. Not thread-safe.
class OutputQueue {
 public:
  // Writes up to this size are copied into the last chunk; larger ones become chunks of their own.
  static constexpr std::size_t kCoalesceBytes = 64 * 1024;

  void push(std::vector<std::uint8_t> bytes);
  // n bytes to fill in at the end of the queue (n <= kCoalesceBytes); valid until the next call.
  std::uint8_t* append(std::size_t n);
  void append(std::span<const std::uint8_t> bytes);
  // Writes as much as the socket takes. ok when everything is sent or the socket would block
  // (check empty()); closed/error when the connection failed.
  IoResult flush(Socket& socket);
  bool empty() const noexcept { return pending_ == 0; }
  std::size_t pending() const noexcept { return pending_; }
  void clear() noexcept;

 private:
  void pop_front() noexcept;
  std::deque<std::vector<std::uint8_t>> chunks_;
  std::size_t offset_ = 0;   // bytes of chunks_.front() already sent
  std::size_t pending_ = 0;  // unsent bytes in total
};

}  // namespace chorus::net
