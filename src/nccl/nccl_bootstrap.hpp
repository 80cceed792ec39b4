// SPDX-License-Identifier: BSD-3-Clause
// Bootstrap of an NCCL communicator through a chorus Store: rank 0 publishes the unique id,
// every rank records that it joined, and a timeout names the ranks that never did.
#pragma once

#include "core/private.hpp"

#include <memory>
#include <string>

#include <nccl.h>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>
#include <chorus/store.hpp>

namespace chorus::nccl {

// Keys of one group instance. Several groups (even with the same name) may be created on one
// store one after the other: each creation takes a generation number from a join counter.
class NcclBootstrap {
 public:
  NcclBootstrap(std::shared_ptr<Store> store, int rank, int size, const std::string& name);

  // Rank 0 creates and publishes the id; others wait for it until `deadline` (TimeoutError
  // saying that rank 0 never published it).
  ncclUniqueId exchange_unique_id(Deadline deadline, const ErrorContext& context);
  // Records this rank's arrival; call right before ncclCommInitRankConfig.
  void mark_joined();
  // For an init that timed out: TimeoutError naming the ranks that never joined (also in
  // context.peers), or saying that all joined and NCCL could not connect them.
  [[noreturn]] void throw_init_timeout(Duration timeout, ErrorContext context);

 private:
  std::string key(const std::string& leaf) const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::string prefix_;
  std::int64_t generation_ = 0;
};

}  // namespace chorus::nccl
