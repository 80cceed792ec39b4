// SPDX-License-Identifier: BSD-3-Clause
#include "store/store_token.hpp"

namespace chorus::store {

std::string token_of(const Store& s) {
  const Store* at = &s;
  while (const Store* base = prefix_base(*at)) {
    at = base;
  }
  const auto* tcp = dynamic_cast<const TcpStore*>(at);
  return tcp ? TcpStoreAccess::token(*tcp) : std::string();
}

}  // namespace chorus::store
