// SPDX-License-Identifier: BSD-3-Clause
// Frame encoding, incremental parsing and buffered writes.
#include "net/frame.hpp"

#include <algorithm>
#include <cstring>

#include "core/bytes.hpp"

namespace chorus::net {
namespace {
constexpr std::size_t kIdleKeep = 4 * 1024;  // an idle connection keeps at most this much
}  // namespace

void put_u32(std::uint8_t* p, std::uint32_t v) noexcept { put_le(p, v, 4); }

std::uint32_t get_u32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(get_le(p, 4));
}

std::size_t begin_frame(std::vector<std::uint8_t>& buf) {
  const std::size_t at = buf.size();
  buf.resize(at + kFrameHeaderBytes);
  return at;
}

void end_frame(std::vector<std::uint8_t>& buf, std::size_t header_offset) {
  put_u32(buf.data() + header_offset,
          static_cast<std::uint32_t>(buf.size() - header_offset - kFrameHeaderBytes));
}

std::vector<std::uint8_t> frame_bytes(std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> out(kFrameHeaderBytes + payload.size());
  put_u32(out.data(), static_cast<std::uint32_t>(payload.size()));
  if (!payload.empty()) {
    std::memcpy(out.data() + kFrameHeaderBytes, payload.data(), payload.size());
  }
  return out;
}

void FrameReader::compact() {
  if (start_ == end_) {
    start_ = end_ = 0;
  } else if (start_ > 0 && start_ >= buf_.size() / 2) {
    std::memmove(buf_.data(), buf_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
}

IoResult FrameReader::read_from(Socket& socket) {
  // Read into a scratch buffer and keep only what arrived: the buffer grows with received
  // bytes, never with a length the peer merely announced (a 4-byte header claiming 9 MiB costs
  // nothing until those bytes come).
  thread_local std::uint8_t scratch[kReadChunk];
  IoResult r = socket.read(scratch, kReadChunk);
  if (r.ok() && r.bytes > 0) {
    feed(std::span<const std::uint8_t>(scratch, r.bytes));
  }
  return r;
}

void FrameReader::feed(std::span<const std::uint8_t> bytes) {
  compact();
  if (buf_.size() - end_ < bytes.size()) {
    // Geometric growth bounded by what is actually buffered: capacity stays within about twice
    // the received bytes.
    const std::size_t need = end_ + bytes.size();
    buf_.resize(std::max(need, std::min(buf_.size() * 2, need + kReadChunk)));
  }
  if (!bytes.empty()) {
    std::memcpy(buf_.data() + end_, bytes.data(), bytes.size());
  }
  end_ += bytes.size();
}

FrameReader::Status FrameReader::peek(std::span<const std::uint8_t>& payload) {
  if (buffered() < kFrameHeaderBytes) {
    return Status::need_more;
  }
  const std::size_t len = get_u32(buf_.data() + start_);
  announced_ = len;
  if (len > max_frame_) {
    return Status::too_large;
  }
  if (buffered() < kFrameHeaderBytes + len) {
    return Status::need_more;
  }
  payload = std::span<const std::uint8_t>(buf_.data() + start_ + kFrameHeaderBytes, len);
  return Status::frame;
}

void FrameReader::pop() noexcept {
  if (buffered() >= kFrameHeaderBytes) {
    const std::size_t len = get_u32(buf_.data() + start_);
    start_ += std::min(kFrameHeaderBytes + len, buffered());
  }
}

FrameReader::Status FrameReader::next(std::span<const std::uint8_t>& payload) {
  const Status s = peek(payload);
  if (s == Status::frame) {
    start_ += kFrameHeaderBytes + payload.size();
  }
  return s;
}

bool FrameReader::frame_ready() const noexcept {
  if (buffered() < kFrameHeaderBytes) {
    return false;
  }
  const std::size_t len = get_u32(buf_.data() + start_);
  return len > max_frame_ || buffered() >= kFrameHeaderBytes + len;
}

bool FrameReader::take_raw(std::uint8_t* out, std::size_t n) {
  if (buffered() < n) {
    return false;
  }
  std::memcpy(out, buf_.data() + start_, n);
  start_ += n;
  return true;
}

void FrameReader::shrink_if_idle() noexcept {
  if (start_ == end_ && buf_.capacity() > kIdleKeep) {
    std::vector<std::uint8_t>().swap(buf_);
    start_ = end_ = 0;
  }
}

namespace {
// First capacity of a coalescing chunk: small enough for malloc's per-thread cache, so a
// request/reply exchange costs no real allocation; chunks double up to kCoalesceBytes.
constexpr std::size_t kFirstChunk = 512;
}  // namespace

void OutputQueue::push(std::vector<std::uint8_t> bytes) {
  if (bytes.empty()) {
    return;
  }
  if (bytes.size() <= kFirstChunk) {  // a small reply joins the others
    append(std::span<const std::uint8_t>(bytes));
    return;
  }
  pending_ += bytes.size();
  chunks_.push_back(std::move(bytes));
}

std::uint8_t* OutputQueue::append(std::size_t n) {
  // A partly sent front chunk may grow too: writev takes its address afresh on every flush.
  if (chunks_.empty() || chunks_.back().size() + n > kCoalesceBytes) {
    chunks_.emplace_back();
    chunks_.back().reserve(std::max(n, kFirstChunk));
  }
  std::vector<std::uint8_t>& back = chunks_.back();
  const std::size_t at = back.size();
  back.resize(at + n);
  pending_ += n;
  return back.data() + at;
}

void OutputQueue::append(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) {
    return;
  }
  if (bytes.size() > kCoalesceBytes) {
    push(std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
    return;
  }
  std::memcpy(append(bytes.size()), bytes.data(), bytes.size());
}

void OutputQueue::pop_front() noexcept {
  chunks_.pop_front();
  offset_ = 0;
}

IoResult OutputQueue::flush(Socket& socket) {
  std::size_t total = 0;
  while (!chunks_.empty()) {
    iovec iov[64];
    int count = 0;
    std::size_t offset = offset_;
    for (auto it = chunks_.begin(); it != chunks_.end() && count < 64; ++it) {
      iov[count].iov_base = it->data() + offset;
      iov[count].iov_len = it->size() - offset;
      offset = 0;
      ++count;
    }
    IoResult r = socket.writev(iov, count);
    if (r.would_block()) {
      return IoResult::done(total);
    }
    if (!r.ok()) {
      return r;
    }
    total += r.bytes;
    pending_ -= r.bytes;
    std::size_t left = r.bytes;
    while (left > 0) {
      const std::size_t in_front = chunks_.front().size() - offset_;
      if (left >= in_front) {
        left -= in_front;
        pop_front();
      } else {
        offset_ += left;
        left = 0;
      }
    }
  }
  return IoResult::done(total);
}

void OutputQueue::clear() noexcept {
  while (!chunks_.empty()) {
    pop_front();
  }
  offset_ = 0;
  pending_ = 0;
}

}  // namespace chorus::net
