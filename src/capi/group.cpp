// SPDX-License-Identifier: BSD-3-Clause
// C ABI: process groups (tcp, nccl, split, shrink, grow and join, abort, destroy).
#include "capi/capi.hpp"

#include <string>
#include <vector>

namespace chorus::capi {
namespace {

// Checked here too (the backends check again) so that a bad rank fails at once, before any
// store traffic, whatever the backend does first.
void check_rank(int rank, int size, const char* function) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument(fmt::format(
        "{}: rank {} is not in [0, size = {}); pass this process's rank and the world size (RANK "
        "and WORLD_SIZE under torchrun)",
        function, rank, size));
  }
}

GroupOptions group_options(const char* name, std::int64_t timeout_ms, const char* function) {
  GroupOptions g;
  if (name != nullptr) {
    g.name = name;
  }
  g.timeout = timeout_from_ms(timeout_ms, function);
  return g;
}

// A new group's name and timeout from a chorus_group_config_t (NULL: the defaults).
GroupOptions group_config(const chorus_group_config_t* config, const char* function) {
  const chorus_group_config_t defaults = CHORUS_GROUP_CONFIG_INITIALIZER;
  const auto c = read_config(config, defaults, sizeof(chorus_group_config_t), function,
                             "CHORUS_GROUP_CONFIG_INITIALIZER");
  return group_options(c.name, c.timeout_ms, function);
}

TcpGroupOptions tcp_options(const chorus_tcp_group_config_t* config, const char* function) {
  const chorus_tcp_group_config_t defaults = CHORUS_TCP_GROUP_CONFIG_INITIALIZER;
  const auto c = read_config(config, defaults, sizeof(chorus_tcp_group_config_t), function,
                             "CHORUS_TCP_GROUP_CONFIG_INITIALIZER");
  TcpGroupOptions options;
  options.group = group_options(c.name, c.timeout_ms, function);
  if (c.interface != nullptr) {
    options.interface = c.interface;
  }
  if (c.sockets_per_peer != 0) {
    options.sockets_per_peer = c.sockets_per_peer;
  }
  return options;
}

// The elastic calls' durations: 0 means the default, a negative one is refused.
void check_elastic_ms(std::int64_t a, std::int64_t b, const char* names, const char* function) {
  if (a < 0 || b < 0) {
    throw InvalidArgument(
        fmt::format("{}: {} must be >= 0 (0: the default); got {} and {}", function, names, a, b));
  }
}

}  // namespace
}  // namespace chorus::capi

using chorus::capi::guarded;
using chorus::capi::require;

extern "C" {

chorus_result_t chorus_group_create_tcp(chorus_store_t* store, int rank, int size,
                                        const chorus_tcp_group_config_t* config,
                                        chorus_group_t** group) {
  static const char* fn = "chorus_group_create_tcp";
  return guarded(fn, [&] {
    require(group, fn, "group (output)");
    *group = nullptr;
    require(store, fn, "store");
    chorus::capi::check_rank(rank, size, fn);
    auto handle = std::make_unique<chorus_group>();
    handle->group =
        chorus::make_tcp_group(store->store, rank, size, chorus::capi::tcp_options(config, fn));
    *group = handle.release();
  });
}

chorus_result_t chorus_group_create_nccl(chorus_store_t* store, int rank, int size,
                                         const chorus_nccl_group_config_t* config,
                                         chorus_group_t** group) {
  static const char* fn = "chorus_group_create_nccl";
  return guarded(fn, [&] {
    require(group, fn, "group (output)");
    *group = nullptr;
    require(store, fn, "store");
    chorus::capi::check_rank(rank, size, fn);
    const chorus_nccl_group_config_t defaults = CHORUS_NCCL_GROUP_CONFIG_INITIALIZER;
    const auto c = chorus::capi::read_config(config, defaults, sizeof(chorus_nccl_group_config_t),
                                             fn, "CHORUS_NCCL_GROUP_CONFIG_INITIALIZER");
    chorus::NcclGroupOptions options;
    options.group = chorus::capi::group_options(c.name, c.timeout_ms, fn);
    options.device = c.device;
    options.stream = c.stream;
    auto handle = std::make_unique<chorus_group>();
    handle->group = chorus::make_nccl_group(store->store, rank, size, options);
    *group = handle.release();
  });
}

chorus_result_t chorus_group_rank(const chorus_group_t* group, int* rank) {
  static const char* fn = "chorus_group_rank";
  return guarded(fn, [&] {
    require(group, fn, "group");
    *require(rank, fn, "rank (output)") = group->group->rank();
  });
}

chorus_result_t chorus_group_size(const chorus_group_t* group, int* size) {
  static const char* fn = "chorus_group_size";
  return guarded(fn, [&] {
    require(group, fn, "group");
    *require(size, fn, "size (output)") = group->group->size();
  });
}

const char* chorus_group_backend(const chorus_group_t* group) {
  return group == nullptr ? nullptr : group->group->backend_name();
}

chorus_result_t chorus_group_split(chorus_group_t* group, const int* ranks, size_t num_ranks,
                                   const chorus_group_config_t* config, chorus_group_t** subgroup) {
  static const char* fn = "chorus_group_split";
  return guarded(fn, [&] {
    require(subgroup, fn, "subgroup (output)");
    *subgroup = nullptr;
    require(group, fn, "group");
    if (num_ranks > 0) {
      require(ranks, fn, "ranks");
    }
    std::vector<int> members(ranks, ranks + num_ranks);
    auto sub = group->group->split(members, chorus::capi::group_config(config, fn));
    if (sub) {
      auto handle = std::make_unique<chorus_group>();
      handle->group = std::move(sub);
      *subgroup = handle.release();
    }
  });
}

chorus_result_t chorus_group_shrink(chorus_group_t* group, const chorus_group_config_t* config,
                                    int64_t grace_ms, int64_t join_timeout_ms,
                                    chorus_group_t** survivors) {
  static const char* fn = "chorus_group_shrink";
  return guarded(fn, [&] {
    require(survivors, fn, "survivors (output)");
    *survivors = nullptr;
    require(group, fn, "group");
    chorus::capi::check_elastic_ms(grace_ms, join_timeout_ms, "grace_ms and join_timeout_ms", fn);
    chorus::ShrinkOptions options;
    options.group = chorus::capi::group_config(config, fn);
    if (grace_ms > 0) {
      options.grace = std::chrono::milliseconds(grace_ms);
    }
    if (join_timeout_ms > 0) {
      options.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    }
    auto handle = std::make_unique<chorus_group>();
    handle->group = group->group->shrink(std::move(options));
    *survivors = handle.release();
  });
}

chorus_result_t chorus_group_grow(chorus_group_t* group, const chorus_group_config_t* config,
                                  int64_t wait_ms, int64_t join_timeout_ms,
                                  chorus_group_t** grown) {
  static const char* fn = "chorus_group_grow";
  return guarded(fn, [&] {
    require(grown, fn, "grown (output)");
    *grown = nullptr;
    require(group, fn, "group");
    chorus::capi::check_elastic_ms(wait_ms, join_timeout_ms, "wait_ms and join_timeout_ms", fn);
    chorus::GrowOptions options;
    options.group = chorus::capi::group_config(config, fn);
    options.wait = std::chrono::milliseconds(wait_ms);
    if (join_timeout_ms > 0) {
      options.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    }
    auto larger = group->group->grow(std::move(options));
    if (larger) {
      auto handle = std::make_unique<chorus_group>();
      handle->group = std::move(larger);
      *grown = handle.release();
    }
  });
}

chorus_result_t chorus_group_join_tcp(chorus_store_t* store,
                                      const chorus_tcp_group_config_t* config, int64_t wait_ms,
                                      int64_t join_timeout_ms, chorus_group_t** group) {
  static const char* fn = "chorus_group_join_tcp";
  return guarded(fn, [&] {
    require(group, fn, "group (output)");
    *group = nullptr;
    require(store, fn, "store");
    chorus::capi::check_elastic_ms(wait_ms, join_timeout_ms, "wait_ms and join_timeout_ms", fn);
    chorus::JoinOptions options;
    if (wait_ms > 0) {
      options.wait = std::chrono::milliseconds(wait_ms);
    }
    if (join_timeout_ms > 0) {
      options.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    }
    auto handle = std::make_unique<chorus_group>();
    handle->group =
        chorus::join_tcp_group(store->store, chorus::capi::tcp_options(config, fn), options);
    *group = handle.release();
  });
}

chorus_result_t chorus_group_stop_admitting(chorus_group_t* group, const char* reason) {
  static const char* fn = "chorus_group_stop_admitting";
  return guarded(fn, [&] {
    require(group, fn, "group");
    group->group->stop_admitting(reason != nullptr ? reason
                                                   : "stopped through the C ABI "
                                                     "(chorus_group_stop_admitting)");
  });
}

chorus_result_t chorus_group_abort(chorus_group_t* group, const char* reason) {
  static const char* fn = "chorus_group_abort";
  return guarded(fn, [&] {
    require(group, fn, "group");
    group->group->abort(reason != nullptr ? reason
                                          : "aborted through the C ABI (chorus_group_abort)");
  });
}

void chorus_group_destroy(chorus_group_t* group) { delete group; }

}  // extern "C"
