// SPDX-License-Identifier: BSD-3-Clause
// Backend::grow_through_lobby() and close_lobby(), which a backend that grows makes its grow()
// and stop_admitting() (process_group.hpp): the members' side of the lobby
// (core/admission.hpp). Rank 0 admits; a broadcast tells the other members what it did; all
// form the larger group; an allreduce on this group confirms that every member did, so the
// members never split between the old group and the new one.
#include <cstdint>
#include <exception>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/admission.hpp"
#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/format.hpp"
#include "core/logging.hpp"

namespace chorus::detail {
namespace {

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "(unknown error)";
}

// Rethrows `error`; a chorus Error as the subclass of its code (so that catch (TimeoutError&)
// sees a wrapped timeout).
[[noreturn]] void rethrow_as_its_kind(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    throw_error(e.code(), e.what(), e.context());
  }
}

}  // namespace

std::unique_ptr<Backend> Backend::grow_through_lobby(GrowOptions options) {
  check_arg(options.wait >= Duration::zero() && options.join_timeout > Duration::zero(),
            "grow {}: wait must be >= 0 and join_timeout > 0", format_on_rank(rank_, size_, name_));
  if (!lobby_) {
    throw InvalidArgument(fmt::format(
        "grow {}: this group cannot grow: only a tcp group made by "
        "make_tcp_group() (or shrunk or grown from one) has a lobby for joiners; a split() "
        "subgroup and an nccl group do not",
        format_on_rank(rank_, size_, name_)));
  }
  GroupOptions group = std::move(options.group);
  if (!group.timeout) {
    group.timeout = timeout_;
  }
  const bool default_name = group.name == GroupOptions{}.name;
  // What rank 0 did, broadcast to the others: the epoch and how many joined (-1: rank 0 could
  // not admit; its own error is rethrown there).
  std::int64_t admitted[2] = {0, 0};
  std::exception_ptr admit_error;
  if (rank_ == 0) {
    try {
      const GrownGroup grown =
          admit_joiners(*lobby_, lobby_name_, size_, options.wait,
                        default_name ? std::string() : group.name, *group.timeout);
      admitted[0] = grown.epoch;
      admitted[1] = grown.size - size_;
    } catch (...) {
      admit_error = std::current_exception();
      admitted[1] = -1;
    }
  }
  OpDescriptor tell;
  tell.type = OpType::broadcast;
  tell.in = tell.out = Tensor::of(admitted, 2);
  try {
    issue(tell)->wait();
  } catch (const std::exception& e) {
    if (admitted[1] > 0) {  // rank 0 seated joiners that no member will form a group with
      give_up_grown(*lobby_, admitted[0],
                    fmt::format("grow failed on group [{}]: {}", name_, e.what()));
    }
    throw;
  }
  if (admit_error) {
    std::rethrow_exception(admit_error);
  }
  const std::int64_t epoch = admitted[0];
  const std::int64_t joiners = admitted[1];
  if (joiners < 0) {
    throw Error(ErrorCode::store,
                fmt::format("grow {}: rank 0 could not read the lobby (its "
                            "error says why); this group goes on",
                            format_on_rank(rank_, size_, name_)),
                ErrorContext{.rank = rank_, .size = size_, .group = name_, .op = "grow"});
  }
  if (joiners == 0) {
    return nullptr;
  }
  const int new_size = size_ + static_cast<int>(joiners);
  if (default_name) {
    group.name = grown_group_name(lobby_name_, epoch);
  }
  std::unique_ptr<Backend> larger;
  std::exception_ptr form_error;
  // A member this group already knows is dead will not come: the formation is given up as
  // soon as this group has failed, rather than at join_timeout.
  Formation formation{.bound = options.join_timeout, .give_up = [this]() -> std::string {
                        if (!is_aborted()) {
                          return {};
                        }
                        return fmt::format("group [{}], which grows, failed: {}", name_,
                                           describe(failure()));
                      }};
  try {
    larger = form_grown(epoch, rank_, new_size, group, std::move(formation));
  } catch (const Error& e) {
    // Says what was waited for, and for how long: the joiners, within join_timeout.
    const std::string seats = joiners == 1 ? fmt::format("rank {}", size_)
                                           : fmt::format("ranks {}-{}", size_, new_size - 1);
    form_error = std::make_exception_ptr(
        Error(e.code(),
              fmt::format("grow {}: forming the larger group [{}] with the joiners as "
                          "its {} failed (it waits GrowOptions::join_timeout, {}, at most); {}: {}",
                          format_on_rank(rank_, size_, name_), group.name, seats,
                          format_duration(options.join_timeout),
                          is_aborted() ? "this group has failed too (shrink it)"
                                       : "this group goes on without them",
                          e.what()),
              e.context()));
  } catch (...) {
    form_error = std::current_exception();
  }
  // Every member formed it, or none keeps it.
  std::int64_t formed = larger ? 1 : 0;
  OpDescriptor confirm;
  confirm.type = OpType::allreduce;
  confirm.op = ReduceOp::min;
  confirm.in = confirm.out = Tensor::of(&formed, 1);
  try {
    issue(confirm)->wait();
  } catch (const std::exception& e) {
    give_up_grown(*lobby_, epoch, fmt::format("grow failed on group [{}]: {}", name_, e.what()));
    throw;
  }
  if (form_error || formed == 0) {
    // The joiners still waiting in the formation take a new ticket.
    give_up_grown(*lobby_, epoch,
                  fmt::format("forming group [{}] failed on a member of [{}]", group.name, name_));
  }
  if (form_error) {
    rethrow_as_its_kind(form_error);
  }
  if (formed == 0) {
    throw Error(ErrorCode::aborted,
                fmt::format("grow {}: forming the larger group [{}] failed on "
                            "another member (its error says why); this group goes on without "
                            "the joiners",
                            format_on_rank(rank_, size_, name_), group.name),
                ErrorContext{.rank = rank_, .size = size_, .group = name_, .op = "grow"});
  }
  larger->inherit_lobby(*this);
  CHORUS_INFO(init, "group [{}] grew to [{}]: {} joined, rank {}/{} is rank {}/{}", name_,
              group.name, joiners, rank_, size_, rank_, new_size);
  return larger;
}

void Backend::close_lobby(const std::string& reason) {
  if (!lobby_) {
    return;  // nobody can be waiting for a group that cannot grow
  }
  detail::close_lobby(*lobby_, reason);
}

}  // namespace chorus::detail
