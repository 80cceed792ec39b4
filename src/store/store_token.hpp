// SPDX-License-Identifier: BSD-3-Clause
// The job token a group's store authenticates with, as the library sees it: the tcp backend
// derives its group secrets from the job's token (tcp/group_key.hpp), and a group built on a
// chorus TcpStore that has a token has one even where CHORUS_STORE_TOKEN is unset.
#pragma once

#include "core/private.hpp"

#include <string>

#include <chorus/store.hpp>
#include <chorus/tcp_store.hpp>

namespace chorus::store {

struct TcpStoreAccess {
  static std::string token(const TcpStore& s);  // "": the client has none
};

// The store a PrefixStore wraps, or nullptr if `s` is not one (prefix_store.cpp).
const Store* prefix_base(const Store& s) noexcept;

// The token of the chorus TcpStore behind `s` (through any PrefixStores); "" when that store
// has none or is of another kind (HashStore, FileStore, torch's store seen through python/).
std::string token_of(const Store& s);

}  // namespace chorus::store
