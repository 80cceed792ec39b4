// SPDX-License-Identifier: BSD-3-Clause
#include "cpu/bootstrap/group_key.hpp"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "core/logging.hpp"
#include "net/hmac.hpp"
#include "store/store_auth.hpp"
#include "store/store_token.hpp"

namespace chorus::cpu {
namespace {

// Domain separation: neither value is ever a store proof, a mesh proof or the other value.
constexpr std::string_view kSecretLabel = "chorus-group-secret/1";
constexpr std::string_view kCheckLabel = "chorus-token-check/1";

GroupSecret keyed(std::string_view label, std::string_view token, const GroupSecret& seed,
                  std::uint64_t group_id) {
  std::uint8_t id[8];
  put_le(id, group_id, 8);
  const net::Mac mac = net::hmac_sha256(net::as_bytes(token), {net::as_bytes(label), seed, id});
  static_assert(sizeof(mac) == sizeof(GroupSecret));
  GroupSecret out{};
  std::copy(mac.begin(), mac.end(), out.begin());
  return out;
}

constexpr const char* kTokenAdvice =
    "every rank of a job needs the same CHORUS_STORE_TOKEN, or none: chorusrun gives its ranks "
    "one; under torchrun or mpirun export the same value (e.g. from `openssl rand -hex 32`) to "
    "every rank, and check that no rank's environment overrides it";

}  // namespace

std::string group_token(const Store& store) {
  std::string token = store::token_of(store);
  return token.empty() ? store::token_from_env() : token;
}

GroupSecret derive_group_secret(std::string_view token, const GroupSecret& seed,
                                std::uint64_t group_id) {
  return keyed(kSecretLabel, token, seed, group_id);
}

GroupSecret token_check(std::string_view token, const GroupSecret& seed, std::uint64_t group_id) {
  return keyed(kCheckLabel, token, seed, group_id);
}

std::string token_mismatch(std::string_view my_token, const GroupSecret* leader_check,
                           const GroupSecret& seed, std::uint64_t group_id,
                           const std::string& leader, const std::string& me) {
  if (leader_check == nullptr && my_token.empty()) {
    return {};
  }
  if (leader_check == nullptr) {
    return fmt::format(
        "the ranks' job tokens differ: {} has a CHORUS_STORE_TOKEN but {} has none, so they "
        "cannot prove membership to each other; {}",
        me, leader, kTokenAdvice);
  }
  if (my_token.empty()) {
    return fmt::format(
        "the ranks' job tokens differ: {} has a CHORUS_STORE_TOKEN but {} has none, so they "
        "cannot prove membership to each other; {}",
        leader, me, kTokenAdvice);
  }
  const GroupSecret mine = token_check(my_token, seed, group_id);
  if (!net::equal_macs(mine, *leader_check)) {
    return fmt::format(
        "the ranks' job tokens differ: {} and {} have different CHORUS_STORE_TOKENs, so they "
        "cannot prove membership to each other; {}",
        leader, me, kTokenAdvice);
  }
  return {};
}

void note_tokenless_group(const std::string& where) {
  static std::atomic<bool> noted{false};
  if (noted.exchange(true)) {
    return;
  }
  CHORUS_WARN(init,
              "{}: no job token (CHORUS_STORE_TOKEN), so this group's membership secret is kept "
              "in the store: anyone who can reach the store's port could join the group (as "
              "with gloo). chorusrun gives its ranks a token; elsewhere export the same "
              "CHORUS_STORE_TOKEN to every rank (docs/torch.md, \"Security\")",
              where);
}

}  // namespace chorus::cpu
