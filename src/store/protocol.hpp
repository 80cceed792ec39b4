// SPDX-License-Identifier: BSD-3-Clause
// The TcpStore wire protocol (docs/protocol.md): handshake, opcodes, request/reply encoding.
// Pure functions, no I/O: everything here is unit-testable and fuzzable.
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/store.hpp>

namespace chorus::store {

// ---- handshake: 8 bytes each way, before any frame ----------------------------------------
inline constexpr std::uint8_t kMagic[4] = {'C', 'H', 'S', 'T'};
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kHelloBytes = 8;
inline constexpr std::uint16_t kHelloFlagMember = 1;  // counts toward wait_for_clients
inline constexpr std::uint16_t kHelloFlagToken = 2;   // the client has a token (for messages)

// auth_required: a kNonceBytes challenge follows (store_auth.hpp).
enum class HelloStatus : std::uint16_t { accepted = 0, unsupported_version = 1, auth_required = 2 };

struct Hello {
  std::uint16_t version = kProtocolVersion;
  std::uint16_t flags = 0;  // client: kHelloFlag*; server: HelloStatus
};
void encode_hello(const Hello& hello, std::uint8_t out[kHelloBytes]) noexcept;
// nullopt if the magic is wrong.
std::optional<Hello> decode_hello(const std::uint8_t in[kHelloBytes]) noexcept;

// ---- frames --------------------------------------------------------------------------------
enum class Op : std::uint8_t {
  set = 1,
  get = 2,
  add = 3,
  compare_set = 4,
  wait = 5,
  check = 6,
  delete_key = 7,
  num_keys = 8,
  multi_get = 9,
  multi_set = 10,
  append = 11,
  list_keys = 12,
  ping = 13,
  wait_clients = 14,
  get_with = 15,
};
const char* to_string(Op op) noexcept;
bool is_known_op(std::uint8_t op) noexcept;
// The first `n` bytes of a client's input, printable ASCII as is and the rest as \xNN, for
// messages that quote what a misbehaving client sent.
std::string printable_prefix(const std::uint8_t* p, std::size_t n);

enum class ReplyStatus : std::uint8_t { ok = 0, timeout = 1, error = 2 };
enum class ErrorKind : std::uint8_t {
  bad_request = 1,
  too_large = 2,
  not_integer = 3,
  unsupported = 4
};

struct Limits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  // Largest request frame: one maximal value plus 1 MiB for keys and headers (a multi_get of
  // thousands of keys fits). Replies are bounded separately by the client.
  // Largest reply frame a client accepts (TcpStoreOptions::max_reply_bytes).
  std::size_t max_reply_bytes = 256u << 20;
  std::size_t max_request_frame() const noexcept {
    return max_value_bytes + max_key_bytes + (1u << 20);
  }
};

// One request. Fields used per op:
//   set/append: keys[0], values[0]      get: keys[0], timeout_ms
//   add: keys[0], delta                 compare_set: keys[0], values[0]=expected, values[1]=desired
//   wait/multi_get: keys, timeout_ms    check: keys           delete_key: keys[0]
//   get_with: keys (the first awaited, the rest read with it), timeout_ms
//   multi_set: keys, values (same count) wait_clients: count, timeout_ms
//   num_keys/list_keys/ping: nothing
struct Request {
  Op op = Op::ping;
  std::uint32_t id = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  std::int64_t delta = 0;
  std::uint64_t timeout_ms = 0;
  std::uint32_t count = 0;
};

// One reply. ok: values (get/compare_set: 1; multi_get, get_with: n), keys (list_keys), integer
// (add/num_keys/wait_clients), flag (check/delete_key). timeout: keys = what is still missing
// (for wait_clients: message says how many joined). error: error + message.
struct Reply {
  ReplyStatus status = ReplyStatus::ok;
  std::uint32_t id = 0;
  std::vector<Bytes> values;
  std::vector<std::string> keys;
  std::int64_t integer = 0;
  bool flag = false;
  // get_with: which of `values` exist (an absent one is an empty value). The first always does.
  std::vector<bool> present;
  ErrorKind error = ErrorKind::bad_request;
  std::string message;
  // ok replies only: the body already encoded (the server's cached list_keys answer); used
  // instead of the fields above.
  const std::vector<std::uint8_t>* encoded_body = nullptr;
};
// Appends `strs` (u32 count, count x str) to out: a list_keys body.
void encode_strings(const std::vector<std::string>& strings, std::vector<std::uint8_t>& out);

// Appends one whole frame (length header included) to out.
void encode_request(const Request& request, std::vector<std::uint8_t>& out);
void encode_reply(Op op, const Reply& reply, std::vector<std::uint8_t>& out);

struct DecodeError {
  ErrorKind kind = ErrorKind::bad_request;
  std::string message;  // "truncated frame", "key of 9000 bytes exceeds the 8192-byte limit" ...
};
// Decodes a request payload (frame without its length header), enforcing limits. On failure
// returns false and fills error; the connection should then be closed.
bool decode_request(std::span<const std::uint8_t> payload, const Limits& limits, Request& out,
                    DecodeError& error);
// The hot requests (set, get, add) as views into the payload, so that serving them copies and
// allocates nothing. Only the fields of op are set.
struct SimpleRequest {
  Op op = Op::ping;
  std::uint32_t id = 0;
  std::string_view key;
  std::span<const std::uint8_t> value;  // set
  std::int64_t delta = 0;               // add
  std::uint64_t timeout_ms = 0;         // get
};
// True for a well-formed set, get or add within the limits, exactly as decode_request would
// accept it. Anything else (other ops, any error) returns false: decode_request then decodes it
// and explains what is wrong.
bool decode_simple_request(std::span<const std::uint8_t> payload, const Limits& limits,
                           SimpleRequest& out) noexcept;

// Decodes a reply payload to a request of type op.
bool decode_reply(Op op, std::span<const std::uint8_t> payload, Reply& out, DecodeError& error);

}  // namespace chorus::store
