// SPDX-License-Identifier: BSD-3-Clause
// NcclBootstrap: unique id through the store; join records for "who is missing" at init.
#include "nccl/nccl_bootstrap.hpp"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/format.hpp"
#include "nccl/nccl_check.hpp"

namespace chorus::nccl {

NcclBootstrap::NcclBootstrap(std::shared_ptr<Store> store, int rank, int size,
                             const std::string& name)
    : store_(std::move(store)), rank_(rank), size_(size), prefix_("chorus/nccl/" + name) {
  // Each rank takes a ticket; tickets [g*size, (g+1)*size) form generation g. A rank cannot
  // start generation g+1 before every rank took its ticket for g, because NCCL init of g needs
  // all of them, so the generations of consecutive groups never mix.
  const std::int64_t ticket = store_->add(prefix_ + "/tickets", 1);
  generation_ = (ticket - 1) / size_;
}

std::string NcclBootstrap::key(const std::string& leaf) const {
  return fmt::format("{}/{}/{}", prefix_, generation_, leaf);
}

ncclUniqueId NcclBootstrap::exchange_unique_id(Deadline deadline, const ErrorContext& context) {
  ncclUniqueId id{};
  if (rank_ == 0) {
    CHORUS_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, context);
    Bytes bytes(sizeof(id.internal));
    std::memcpy(bytes.data(), id.internal, bytes.size());
    store_->set(key("unique_id"), bytes);
    return id;
  }
  Bytes bytes;
  try {
    bytes = store_->get(key("unique_id"), deadline.remaining());
  } catch (const TimeoutError& e) {
    ErrorContext ctx = context;
    ctx.peers = {0};
    ctx.timeout = e.context().timeout;
    throw TimeoutError(
        fmt::format("{}: rank 0 did not publish the NCCL unique id (store key '{}') in time, so "
                    "rank 0 never reached make_nccl_group for this group: it crashed, is stuck, "
                    "or uses another group name or store; check rank 0's log. ({})",
                    where(context), key("unique_id"), e.what()),
        std::move(ctx));
  }
  if (bytes.size() != sizeof(id.internal)) {
    throw StoreError(
        fmt::format("{}: the NCCL unique id in the store has {} bytes, expected {}; "
                    "another program wrote key '{}': use a separate store prefix",
                    where(context), bytes.size(), sizeof(id.internal), key("unique_id")),
        context);
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

void NcclBootstrap::mark_joined() { store_->set(key(fmt::format("joined/{}", rank_)), "1"); }

void NcclBootstrap::throw_init_timeout(Duration timeout, ErrorContext context) {
  context.timeout = timeout;
  std::vector<int> missing;
  try {
    // Bounded: only the timeout path pays for these round trips.
    constexpr int kMaxChecked = 4096;
    for (int r = 0; r < size_ && r < kMaxChecked; ++r) {
      if (!store_->check({key(fmt::format("joined/{}", r))})) {
        missing.push_back(r);
      }
    }
  } catch (const std::exception& e) {
    throw TimeoutError(
        fmt::format("{}: NCCL communicator init did not complete within {} (and the store could "
                    "not say which ranks joined: {}); the half-built communicator was aborted. "
                    "Check that every rank calls make_nccl_group with the same size and store",
                    where(context), format_duration(timeout), e.what()),
        context);
  }
  if (!missing.empty()) {
    const std::string text = fmt::format(
        "{}: NCCL communicator init did not complete within {}: rank(s) {} never joined (they "
        "did not call make_nccl_group, crashed, or use another store or group name); the "
        "half-built communicator was aborted. Check those ranks' logs, or raise the group's "
        "timeout if they start late",
        where(context), format_duration(timeout), format_ranks(missing));
    context.peers = std::move(missing);
    throw TimeoutError(text, std::move(context));
  }
  const std::string text = fmt::format(
      "{}: NCCL communicator init did not complete within {} although all {} ranks joined; NCCL "
      "could not connect them (network, firewall, or two ranks on one GPU). The half-built "
      "communicator was aborted; run with NCCL_DEBUG=INFO to see where NCCL waits",
      where(context), format_duration(timeout), size_);
  throw TimeoutError(text, std::move(context));
}

}  // namespace chorus::nccl
