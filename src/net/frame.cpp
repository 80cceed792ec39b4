// SPDX-License-Identifier: BSD-3-Clause
// Frame encoding, incremental parsing and buffered writes.
#include "net/frame.hpp"

#include <algorithm>
#include <cstring>

#include "core/bytes.hpp"

namespace chorus::net {
namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kIdleKeep = 16 * 1024;
}  // namespace

void put_u32(std::uint8_t* p, std::uint32_t v) noexcept { put_le(p, v, 4); }

std::uint32_t get_u32(const std::uint8_t* p) noexcept { return static_cast<std::uint32_t>(get_le(p, 4)); }

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
  compact();
  std::size_t want = kReadChunk;
  // A large frame in progress: read straight into its final place instead of 64 KiB at a time.
  if (buffered() >= kFrameHeaderBytes) {
    const std::size_t len = get_u32(buf_.data() + start_);
    if (len <= max_frame_ && kFrameHeaderBytes + len > buffered()) {
      want = std::max(want, kFrameHeaderBytes + len - buffered());
    }
  }
  if (buf_.size() - end_ < want) {
    buf_.resize(end_ + want);
  }
  IoResult r = socket.read(buf_.data() + end_, want);
  if (r.ok()) {
    end_ += r.bytes;
  }
  return r;
}

void FrameReader::feed(std::span<const std::uint8_t> bytes) {
  compact();
  if (buf_.size() - end_ < bytes.size()) {
    buf_.resize(end_ + bytes.size());
  }
  if (!bytes.empty()) {
    std::memcpy(buf_.data() + end_, bytes.data(), bytes.size());
  }
  end_ += bytes.size();
}

FrameReader::Status FrameReader::next(std::span<const std::uint8_t>& payload) {
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
  start_ += kFrameHeaderBytes + len;
  return Status::frame;
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
  if (start_ == end_ && buf_.capacity() > kIdleKeep * 8) {
    std::vector<std::uint8_t>().swap(buf_);
    start_ = end_ = 0;
  }
}

void OutputQueue::push(std::vector<std::uint8_t> bytes) {
  if (bytes.empty()) {
    return;
  }
  pending_ += bytes.size();
  chunks_.push_back(std::move(bytes));
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
        chunks_.pop_front();
        offset_ = 0;
      } else {
        offset_ += left;
        left = 0;
      }
    }
  }
  return IoResult::done(total);
}

void OutputQueue::clear() noexcept {
  chunks_.clear();
  offset_ = 0;
  pending_ = 0;
}

}  // namespace chorus::net
