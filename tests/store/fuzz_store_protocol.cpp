// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target for the store protocol decoder (docs/protocol.md): the server's request
// decoder with its limits, the client's reply decoder, the incremental frame reader and the
// handshake. Built and run by scripts/run_store_fuzz.sh (meson test store_fuzz) with clang's
// -fsanitize=fuzzer,address; seeds in tests/store/fuzz_corpus/.
//
// Input layout: byte 0 picks the decoder, the rest is what a peer would send.
//   0: one request payload (also through the server's set/get/add fast path, which must agree)
//   1: one reply payload (byte 1 picks the op)
//   2: a byte stream of frames, fed to FrameReader in odd-sized pieces, each frame decoded
//   3: a handshake
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "net/frame.hpp"
#include "store/protocol.hpp"

using namespace chorus;
using namespace chorus::store;

namespace {

Limits fuzz_limits() {
  Limits l;
  l.max_key_bytes = 256;
  l.max_value_bytes = 4096;
  return l;
}

// A request that decoded must survive encode -> decode unchanged in shape.
void round_trip(const Request& q, const Limits& limits) {
  std::vector<std::uint8_t> framed;
  encode_request(q, framed);
  Request again;
  DecodeError err;
  const std::span<const std::uint8_t> payload(framed.data() + net::kFrameHeaderBytes,
                                              framed.size() - net::kFrameHeaderBytes);
  if (!decode_request(payload, limits, again, err) || again.op != q.op || again.keys != q.keys ||
      again.values != q.values) {
    std::abort();  // the encoder and decoder disagree
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) {
    return 0;
  }
  const Limits limits = fuzz_limits();
  const std::uint8_t mode = data[0] % 4;
  std::span<const std::uint8_t> rest(data + 1, size - 1);
  switch (mode) {
    case 0: {
      Request q;
      DecodeError err;
      const bool general = decode_request(rest, limits, q, err);
      if (general) {
        round_trip(q, limits);
      }
      // The server's fast path for set/get/add accepts exactly what decode_request accepts.
      SimpleRequest s;
      const bool simple = decode_simple_request(rest, limits, s);
      const bool hot = general && (q.op == Op::set || q.op == Op::get || q.op == Op::add);
      if (simple != hot || (simple && (s.op != q.op || s.id != q.id || s.key != q.keys.at(0)))) {
        std::abort();
      }
      break;
    }
    case 1: {
      if (rest.empty()) {
        break;
      }
      const auto op = static_cast<Op>(1 + rest[0] % 14);
      Reply r;
      DecodeError err;
      (void)decode_reply(op, rest.subspan(1), r, err);
      break;
    }
    case 2: {
      net::FrameReader reader(limits.max_request_frame());
      std::size_t at = 0;
      std::size_t piece = 1;
      while (at < rest.size()) {
        const std::size_t n = std::min(piece, rest.size() - at);
        reader.feed(rest.subspan(at, n));
        at += n;
        piece = piece * 3 + 1;
        std::span<const std::uint8_t> payload;
        for (;;) {
          const auto status = reader.next(payload);
          if (status == net::FrameReader::Status::too_large) {
            return 0;  // the server closes the connection here
          }
          if (status == net::FrameReader::Status::need_more) {
            break;
          }
          Request q;
          DecodeError err;
          if (!decode_request(payload, limits, q, err)) {
            return 0;
          }
        }
        // Memory follows received bytes: never more than about twice what was fed.
        if (reader.footprint() > 2 * (at + 1) + (64u << 10)) {
          std::abort();
        }
      }
      break;
    }
    default: {
      if (rest.size() >= kHelloBytes) {
        (void)decode_hello(rest.data());
      }
      break;
    }
  }
  return 0;
}
