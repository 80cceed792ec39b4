// SPDX-License-Identifier: BSD-3-Clause
// Encoding and bounds-checked decoding of TcpStore frames.
#include "store/protocol.hpp"

#include <cstring>

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "net/frame.hpp"

namespace chorus::store {
namespace {

// ---- writer --------------------------------------------------------------------------------
void put_u8(std::vector<std::uint8_t>& out, std::uint8_t v) { out.push_back(v); }
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) { append_le(out, v, 4); }
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) { append_le(out, v, 8); }
void put_blob(std::vector<std::uint8_t>& out, const void* data, std::size_t len) {
  put_u32(out, static_cast<std::uint32_t>(len));
  const std::size_t at = out.size();
  out.resize(at + len);
  if (len > 0) {
    std::memcpy(out.data() + at, data, len);
  }
}
void put_string(std::vector<std::uint8_t>& out, const std::string& s) {
  put_blob(out, s.data(), s.size());
}
void put_bytes(std::vector<std::uint8_t>& out, const Bytes& b) {
  put_blob(out, b.data(), b.size());
}
void put_strings(std::vector<std::uint8_t>& out, const std::vector<std::string>& v) {
  put_u32(out, static_cast<std::uint32_t>(v.size()));
  for (const auto& s : v) {
    put_string(out, s);
  }
}

// ---- reader: every read is bounds-checked; the first failure sticks -----------------------
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == in_.size(); }
  std::size_t left() const { return in_.size() - pos_; }
  const std::string& why() const { return why_; }
  void fail(std::string why) {
    if (ok_) {
      ok_ = false;
      why_ = std::move(why);
    }
  }
  std::uint8_t u8() {
    if (!need(1)) {
      return 0;
    }
    return in_[pos_++];
  }
  std::uint32_t u32() {
    if (!need(4)) {
      return 0;
    }
    const std::uint32_t v = net::get_u32(in_.data() + pos_);
    pos_ += 4;
    return v;
  }
  std::uint64_t u64() {
    const std::uint64_t lo = u32();
    const std::uint64_t hi = u32();
    return lo | (hi << 32);
  }
  // A length-prefixed blob of at most `limit` bytes; `what` names it in errors.
  bool blob(std::size_t limit, const char* what, const std::uint8_t*& data, std::size_t& len) {
    const std::uint32_t n = u32();
    if (!ok_) {
      return false;
    }
    if (n > limit) {
      fail(fmt::format("{} of {} bytes exceeds the {}-byte limit", what, n, limit));
      too_large_ = true;
      return false;
    }
    if (!need(n)) {
      return false;
    }
    data = in_.data() + pos_;
    len = n;
    pos_ += n;
    return true;
  }
  std::string string(std::size_t limit, const char* what) {
    const std::uint8_t* p = nullptr;
    std::size_t n = 0;
    if (!blob(limit, what, p, n)) {
      return {};
    }
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  Bytes bytes(std::size_t limit, const char* what) {
    const std::uint8_t* p = nullptr;
    std::size_t n = 0;
    if (!blob(limit, what, p, n)) {
      return {};
    }
    return Bytes(p, p + n);
  }
  // A count of items each at least `min_item` bytes: rejects counts the frame cannot hold, so a
  // hostile count never triggers a huge allocation.
  std::uint32_t count(std::size_t min_item) {
    const std::uint32_t n = u32();
    if (ok_ && static_cast<std::uint64_t>(n) * min_item > left()) {
      fail(fmt::format("item count {} does not fit in the {} bytes left in the frame", n, left()));
      return 0;
    }
    return n;
  }
  bool too_large() const { return too_large_; }

 private:
  bool need(std::size_t n) {
    if (!ok_) {
      return false;
    }
    if (left() < n) {
      fail("truncated frame");
      return false;
    }
    return true;
  }
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
  bool too_large_ = false;
  std::string why_;
};

constexpr std::size_t kMaxReplyItem = std::size_t{1} << 31;

bool finish(Reader& r, DecodeError& error) {
  if (r.ok() && !r.at_end()) {
    r.fail(fmt::format("{} unexpected trailing bytes", r.left()));
  }
  if (!r.ok()) {
    error.kind = r.too_large() ? ErrorKind::too_large : ErrorKind::bad_request;
    error.message = r.why();
    return false;
  }
  return true;
}

}  // namespace

void encode_hello(const Hello& hello, std::uint8_t out[kHelloBytes]) noexcept {
  std::memcpy(out, kMagic, 4);
  put_le(out + 4, hello.version, 2);
  put_le(out + 6, hello.flags, 2);
}

std::optional<Hello> decode_hello(const std::uint8_t in[kHelloBytes]) noexcept {
  if (std::memcmp(in, kMagic, 4) != 0) {
    return std::nullopt;
  }
  Hello h;
  h.version = static_cast<std::uint16_t>(get_le(in + 4, 2));
  h.flags = static_cast<std::uint16_t>(get_le(in + 6, 2));
  return h;
}

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::set:
      return "set";
    case Op::get:
      return "get";
    case Op::add:
      return "add";
    case Op::compare_set:
      return "compare_set";
    case Op::wait:
      return "wait";
    case Op::check:
      return "check";
    case Op::delete_key:
      return "delete_key";
    case Op::num_keys:
      return "num_keys";
    case Op::multi_get:
      return "multi_get";
    case Op::get_with:
      return "get_with";
    case Op::multi_set:
      return "multi_set";
    case Op::append:
      return "append";
    case Op::list_keys:
      return "list_keys";
    case Op::ping:
      return "ping";
    case Op::wait_clients:
      return "wait_clients";
  }
  return "unknown";
}

bool is_known_op(std::uint8_t op) noexcept { return op >= 1 && op <= 15; }

void encode_request(const Request& q, std::vector<std::uint8_t>& out) {
  const std::size_t header = net::begin_frame(out);
  put_u8(out, static_cast<std::uint8_t>(q.op));
  put_u32(out, q.id);
  switch (q.op) {
    case Op::set:
    case Op::append:
      put_string(out, q.keys.at(0));
      put_bytes(out, q.values.at(0));
      break;
    case Op::get:
      put_u64(out, q.timeout_ms);
      put_string(out, q.keys.at(0));
      break;
    case Op::add:
      put_string(out, q.keys.at(0));
      put_u64(out, static_cast<std::uint64_t>(q.delta));
      break;
    case Op::compare_set:
      put_string(out, q.keys.at(0));
      put_bytes(out, q.values.at(0));
      put_bytes(out, q.values.at(1));
      break;
    case Op::wait:
    case Op::multi_get:
    case Op::get_with:
      put_u64(out, q.timeout_ms);
      put_strings(out, q.keys);
      break;
    case Op::check:
      put_strings(out, q.keys);
      break;
    case Op::delete_key:
      put_string(out, q.keys.at(0));
      break;
    case Op::multi_set:
      put_u32(out, static_cast<std::uint32_t>(q.keys.size()));
      for (std::size_t i = 0; i < q.keys.size(); ++i) {
        put_string(out, q.keys[i]);
        put_bytes(out, q.values.at(i));
      }
      break;
    case Op::wait_clients:
      put_u64(out, q.timeout_ms);
      put_u32(out, q.count);
      break;
    case Op::num_keys:
    case Op::list_keys:
    case Op::ping:
      break;
  }
  net::end_frame(out, header);
}

bool decode_request(std::span<const std::uint8_t> payload, const Limits& limits, Request& q,
                    DecodeError& error) {
  Reader r(payload);
  const std::uint8_t op = r.u8();
  q.id = r.u32();
  if (!r.ok()) {
    return finish(r, error);
  }
  if (!is_known_op(op)) {
    error.kind = ErrorKind::unsupported;
    error.message = fmt::format("unknown opcode {}", op);
    return false;
  }
  q.op = static_cast<Op>(op);
  const std::size_t K = limits.max_key_bytes;
  const std::size_t V = limits.max_value_bytes;
  auto keys = [&] {
    const std::uint32_t n = r.count(4);
    q.keys.reserve(n);
    for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
      q.keys.push_back(r.string(K, "key"));
    }
  };
  switch (q.op) {
    case Op::set:
    case Op::append:
      q.keys.push_back(r.string(K, "key"));
      q.values.push_back(r.bytes(V, "value"));
      break;
    case Op::get:
      q.timeout_ms = r.u64();
      q.keys.push_back(r.string(K, "key"));
      break;
    case Op::add:
      q.keys.push_back(r.string(K, "key"));
      q.delta = static_cast<std::int64_t>(r.u64());
      break;
    case Op::compare_set:
      q.keys.push_back(r.string(K, "key"));
      q.values.push_back(r.bytes(V, "expected value"));
      q.values.push_back(r.bytes(V, "desired value"));
      break;
    case Op::wait:
    case Op::multi_get:
      q.timeout_ms = r.u64();
      keys();
      break;
    case Op::get_with:
      q.timeout_ms = r.u64();
      keys();
      if (r.ok() && q.keys.empty()) {
        error.message = "get_with names no key to wait for";
        return false;
      }
      break;
    case Op::check:
      keys();
      break;
    case Op::delete_key:
      q.keys.push_back(r.string(K, "key"));
      break;
    case Op::multi_set: {
      const std::uint32_t n = r.count(8);
      q.keys.reserve(n);
      q.values.reserve(n);
      for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
        q.keys.push_back(r.string(K, "key"));
        q.values.push_back(r.bytes(V, "value"));
      }
      break;
    }
    case Op::wait_clients:
      q.timeout_ms = r.u64();
      q.count = r.u32();
      break;
    case Op::num_keys:
    case Op::list_keys:
    case Op::ping:
      break;
  }
  return finish(r, error);
}

bool decode_simple_request(std::span<const std::uint8_t> payload, const Limits& limits,
                           SimpleRequest& out) noexcept {
  const std::uint8_t* p = payload.data();
  std::size_t left = payload.size();
  if (left < 5) {
    return false;
  }
  const std::uint8_t op = p[0];
  if (op != static_cast<std::uint8_t>(Op::set) && op != static_cast<std::uint8_t>(Op::get) &&
      op != static_cast<std::uint8_t>(Op::add)) {
    return false;
  }
  out.op = static_cast<Op>(op);
  out.id = net::get_u32(p + 1);
  p += 5;
  left -= 5;
  auto u64 = [&](std::uint64_t& v) {
    if (left < 8) {
      return false;
    }
    v = get_le(p, 8);
    p += 8;
    left -= 8;
    return true;
  };
  auto blob = [&](std::size_t limit, const std::uint8_t*& data, std::size_t& len) {
    if (left < 4) {
      return false;
    }
    len = net::get_u32(p);
    if (len > limit || left - 4 < len) {
      return false;
    }
    data = p + 4;
    p += 4 + len;
    left -= 4 + len;
    return true;
  };
  const std::uint8_t* key = nullptr;
  std::size_t key_len = 0;
  switch (out.op) {
    case Op::set: {
      const std::uint8_t* value = nullptr;
      std::size_t value_len = 0;
      if (!blob(limits.max_key_bytes, key, key_len) ||
          !blob(limits.max_value_bytes, value, value_len)) {
        return false;
      }
      out.value = std::span<const std::uint8_t>(value, value_len);
      break;
    }
    case Op::get:
      if (!u64(out.timeout_ms) || !blob(limits.max_key_bytes, key, key_len)) {
        return false;
      }
      break;
    default: {  // add
      std::uint64_t delta = 0;
      if (!blob(limits.max_key_bytes, key, key_len) || !u64(delta)) {
        return false;
      }
      out.delta = static_cast<std::int64_t>(delta);
      break;
    }
  }
  out.key = std::string_view(reinterpret_cast<const char*>(key), key_len);
  return left == 0;  // trailing bytes: decode_request explains
}

void encode_reply(Op op, const Reply& p, std::vector<std::uint8_t>& out) {
  const std::size_t header = net::begin_frame(out);
  put_u8(out, static_cast<std::uint8_t>(p.status));
  put_u32(out, p.id);
  if (p.status == ReplyStatus::timeout) {
    put_strings(out, p.keys);
    put_string(out, p.message);
  } else if (p.status == ReplyStatus::error) {
    put_u8(out, static_cast<std::uint8_t>(p.error));
    put_string(out, p.message);
  } else if (p.encoded_body != nullptr) {
    out.insert(out.end(), p.encoded_body->begin(), p.encoded_body->end());
  } else {
    switch (op) {
      case Op::get:
      case Op::compare_set:
        put_bytes(out, p.values.at(0));
        break;
      case Op::multi_get:
        put_u32(out, static_cast<std::uint32_t>(p.values.size()));
        for (const auto& v : p.values) {
          put_bytes(out, v);
        }
        break;
      case Op::get_with:
        put_u32(out, static_cast<std::uint32_t>(p.values.size()));
        for (std::size_t i = 0; i < p.values.size(); ++i) {
          put_u8(out, i < p.present.size() && p.present[i] ? 1 : 0);
          put_bytes(out, p.values[i]);
        }
        break;
      case Op::add:
      case Op::num_keys:
      case Op::wait_clients:
        put_u64(out, static_cast<std::uint64_t>(p.integer));
        break;
      case Op::check:
      case Op::delete_key:
        put_u8(out, p.flag ? 1 : 0);
        break;
      case Op::list_keys:
        put_strings(out, p.keys);
        break;
      case Op::set:
      case Op::append:
      case Op::wait:
      case Op::multi_set:
      case Op::ping:
        break;
    }
  }
  net::end_frame(out, header);
}

void encode_strings(const std::vector<std::string>& strings, std::vector<std::uint8_t>& out) {
  put_strings(out, strings);
}

bool decode_reply(Op op, std::span<const std::uint8_t> payload, Reply& p, DecodeError& error) {
  Reader r(payload);
  const std::uint8_t status = r.u8();
  p.id = r.u32();
  if (!r.ok()) {
    return finish(r, error);
  }
  if (status > 2) {
    error.message = fmt::format("unknown reply status {}", status);
    return false;
  }
  p.status = static_cast<ReplyStatus>(status);
  auto strings = [&](std::vector<std::string>& v) {
    const std::uint32_t n = r.count(4);
    v.reserve(n);
    for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
      v.push_back(r.string(kMaxReplyItem, "key"));
    }
  };
  if (p.status == ReplyStatus::timeout) {
    strings(p.keys);
    p.message = r.string(kMaxReplyItem, "message");
  } else if (p.status == ReplyStatus::error) {
    p.error = static_cast<ErrorKind>(r.u8());
    p.message = r.string(kMaxReplyItem, "message");
  } else {
    switch (op) {
      case Op::get:
      case Op::compare_set:
        p.values.push_back(r.bytes(kMaxReplyItem, "value"));
        break;
      case Op::multi_get: {
        const std::uint32_t n = r.count(4);
        p.values.reserve(n);
        for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
          p.values.push_back(r.bytes(kMaxReplyItem, "value"));
        }
        break;
      }
      case Op::get_with: {
        const std::uint32_t n = r.count(5);
        p.values.reserve(n);
        p.present.reserve(n);
        for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
          p.present.push_back(r.u8() != 0);
          p.values.push_back(r.bytes(kMaxReplyItem, "value"));
        }
        break;
      }
      case Op::add:
      case Op::num_keys:
      case Op::wait_clients:
        p.integer = static_cast<std::int64_t>(r.u64());
        break;
      case Op::check:
      case Op::delete_key:
        p.flag = r.u8() != 0;
        break;
      case Op::list_keys:
        strings(p.keys);
        break;
      case Op::set:
      case Op::append:
      case Op::wait:
      case Op::multi_set:
      case Op::ping:
        break;
    }
  }
  return finish(r, error);
}

std::string printable_prefix(const std::uint8_t* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = static_cast<char>(p[i]);
    if (c >= 32 && c < 127) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", p[i]);
    }
  }
  return out;
}

}  // namespace chorus::store
