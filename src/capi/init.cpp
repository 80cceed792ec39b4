// SPDX-License-Identifier: BSD-3-Clause
// C ABI: the world group from the launcher's environment.
#include "capi/capi.hpp"

#include <chorus/init.hpp>

using chorus::capi::guarded;
using chorus::capi::require;

extern "C" {

chorus_result_t chorus_init_from_env(const chorus_init_config_t* config, chorus_group_t** group,
                                     chorus_store_t** store) {
  static const char* fn = "chorus_init_from_env";
  return guarded(fn, [&] {
    require(group, fn, "group (output)");
    *group = nullptr;
    if (store != nullptr) {
      *store = nullptr;
    }
    const chorus_init_config_t defaults = CHORUS_INIT_CONFIG_INITIALIZER;
    const auto c = chorus::capi::read_config(config, defaults, sizeof(chorus_init_config_t), fn,
                                             "CHORUS_INIT_CONFIG_INITIALIZER");
    chorus::Backend backend;
    const auto backend_value = chorus::capi::c_enum_value(c.backend);
    if (backend_value == CHORUS_BACKEND_TCP) {
      backend = chorus::Backend::tcp;
    } else if (backend_value == CHORUS_BACKEND_NCCL) {
      backend = chorus::Backend::nccl;
    } else {
      throw chorus::InvalidArgument(
          fmt::format("{}: config.backend is {}; use CHORUS_BACKEND_TCP or CHORUS_BACKEND_NCCL", fn,
                      backend_value));
    }
    chorus::GroupOptions g;
    if (c.name != nullptr) {
      g.name = c.name;
    }
    g.timeout = chorus::capi::timeout_from_ms(c.timeout_ms, fn);
    chorus::InitOptions options;
    options.tcp.group = g;
    options.nccl.group = g;
    options.nccl.device = c.device;
    options.nccl.stream = c.stream;
    options.store_timeout = g.timeout;
    chorus::World world = chorus::init_world_from_env(backend, options);
    auto group_handle = std::make_unique<chorus_group>();
    group_handle->group = std::move(world.group);
    std::unique_ptr<chorus_store> store_handle;
    if (store != nullptr) {
      store_handle = std::make_unique<chorus_store>();
      store_handle->tcp = dynamic_cast<chorus::TcpStore*>(world.store.get());
      store_handle->store = std::move(world.store);
    }
    *group = group_handle.release();
    if (store != nullptr) {
      *store = store_handle.release();
    }
  });
}

}  // extern "C"
