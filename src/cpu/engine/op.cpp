// SPDX-License-Identifier: BSD-3-Clause
// Op::what(): the op as error messages and logs name it.
#include "cpu/engine/op.hpp"

#include <fmt/format.h>

#include "core/format.hpp"
#include "cpu/transports/transport.hpp"

namespace chorus::cpu {

std::string Op::what() const {
  if (kind != Kind::collective) {
    const std::string other = peer == kAnyPeer ? "any rank" : fmt::format("rank {}", peer);
    return fmt::format("{} (p2p seq {}, tag {}, {} x {}, {} {})", call.name, call.seq, tag,
                       args.count, to_string(args.dtype), kind == Kind::send ? "to" : "from",
                       other);
  }
  std::string text = describe(sig);
  if (sig.kind != OpType::barrier) {
    // describe() gives counts; messages also want bytes.
    text.insert(text.size() - 1, fmt::format(", {}", format_bytes(bytes)));
  }
  return text;
}

}  // namespace chorus::cpu
