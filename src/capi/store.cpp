// SPDX-License-Identifier: BSD-3-Clause
// C ABI: stores (TcpStore, hash, file, prefix) and the standalone TcpStore server.
#include "capi/capi.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace chorus::capi {
namespace {

std::vector<std::string> key_list(const char* const* keys, std::size_t num_keys,
                                  const char* function) {
  if (num_keys > 0) {
    require(keys, function, "keys");
  }
  std::vector<std::string> out;
  out.reserve(num_keys);
  for (std::size_t i = 0; i < num_keys; ++i) {
    if (keys[i] == nullptr) {
      throw InvalidArgument(
          fmt::format("{}: keys[{}] is NULL; every key must be a C string", function, i));
    }
    out.emplace_back(keys[i]);
  }
  return out;
}

Store& store_of(chorus_store_t* s, const char* function) {
  return *require(s, function, "store")->store;
}

}  // namespace
}  // namespace chorus::capi

using chorus::capi::guarded;
using chorus::capi::require;

extern "C" {

chorus_result_t chorus_tcp_store_create(const chorus_tcp_store_config_t* config,
                                        chorus_store_t** store) {
  static const char* fn = "chorus_tcp_store_create";
  return guarded(fn, [&] {
    require(store, fn, "store (output)");
    *store = nullptr;
    const chorus_tcp_store_config_t defaults = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
    const auto c = chorus::capi::read_config(config, defaults, sizeof(chorus_tcp_store_config_t),
                                             fn, "CHORUS_TCP_STORE_CONFIG_INITIALIZER");
    chorus::TcpStoreOptions options;
    options.host = c.host != nullptr ? c.host : "127.0.0.1";
    options.port = c.port;
    options.is_server = c.is_server != 0;
    if (c.wait_for_clients > 0) {
      options.wait_for_clients = c.wait_for_clients;
    }
    options.timeout = chorus::capi::timeout_from_ms(c.timeout_ms, fn);
    auto tcp = std::make_shared<chorus::TcpStore>(options);
    auto handle = std::make_unique<chorus_store>();
    handle->tcp = tcp.get();
    handle->store = std::move(tcp);
    *store = handle.release();
  });
}

chorus_result_t chorus_hash_store_create(int64_t timeout_ms, chorus_store_t** store) {
  static const char* fn = "chorus_hash_store_create";
  return guarded(fn, [&] {
    require(store, fn, "store (output)");
    *store = nullptr;
    auto handle = std::make_unique<chorus_store>();
    handle->store = chorus::make_hash_store(chorus::capi::timeout_from_ms(timeout_ms, fn));
    *store = handle.release();
  });
}

chorus_result_t chorus_file_store_create(const char* directory, int64_t timeout_ms,
                                         chorus_store_t** store) {
  static const char* fn = "chorus_file_store_create";
  return guarded(fn, [&] {
    require(store, fn, "store (output)");
    *store = nullptr;
    require(directory, fn, "directory");
    auto handle = std::make_unique<chorus_store>();
    handle->store =
        chorus::make_file_store(directory, chorus::capi::timeout_from_ms(timeout_ms, fn));
    *store = handle.release();
  });
}

chorus_result_t chorus_prefix_store_create(const char* prefix, chorus_store_t* base,
                                           chorus_store_t** store) {
  static const char* fn = "chorus_prefix_store_create";
  return guarded(fn, [&] {
    require(store, fn, "store (output)");
    *store = nullptr;
    require(prefix, fn, "prefix");
    require(base, fn, "base");
    auto handle = std::make_unique<chorus_store>();
    handle->store = chorus::make_prefix_store(prefix, base->store);
    *store = handle.release();
  });
}

chorus_result_t chorus_store_port(chorus_store_t* store, uint16_t* port) {
  static const char* fn = "chorus_store_port";
  return guarded(fn, [&] {
    require(store, fn, "store");
    require(port, fn, "port (output)");
    if (store->tcp == nullptr) {
      throw chorus::InvalidArgument(
          "chorus_store_port: this store is not a TcpStore (it has no port); create it with "
          "chorus_tcp_store_create");
    }
    *port = store->tcp->port();
  });
}

void chorus_store_free(chorus_store_t* store) {
  // Destructors do not throw (they log): nothing to translate.
  delete store;
}

chorus_result_t chorus_store_set(chorus_store_t* store, const char* key, const void* value,
                                 size_t length) {
  static const char* fn = "chorus_store_set";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(key, fn, "key");
    if (length > 0) {
      require(value, fn, "value");
    }
    const auto* p = static_cast<const std::uint8_t*>(value);
    s.set(key, chorus::Bytes(p, p + length));
  });
}

chorus_result_t chorus_store_get(chorus_store_t* store, const char* key, int64_t timeout_ms,
                                 void** value, size_t* length) {
  static const char* fn = "chorus_store_get";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(key, fn, "key");
    require(value, fn, "value (output)");
    *value = nullptr;
    const chorus::Bytes bytes = s.get(key, chorus::capi::timeout_from_ms(timeout_ms, fn));
    auto* out = static_cast<std::uint8_t*>(std::malloc(bytes.size() + 1));
    if (out == nullptr) {
      throw std::bad_alloc();
    }
    if (!bytes.empty()) {
      std::memcpy(out, bytes.data(), bytes.size());
    }
    out[bytes.size()] = 0;
    *value = out;
    if (length != nullptr) {
      *length = bytes.size();
    }
  });
}

chorus_result_t chorus_store_add(chorus_store_t* store, const char* key, int64_t delta,
                                 int64_t* result) {
  static const char* fn = "chorus_store_add";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(key, fn, "key");
    const std::int64_t v = s.add(key, delta);
    if (result != nullptr) {
      *result = v;
    }
  });
}

chorus_result_t chorus_store_wait(chorus_store_t* store, const char* const* keys, size_t num_keys,
                                  int64_t timeout_ms) {
  static const char* fn = "chorus_store_wait";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    s.wait(chorus::capi::key_list(keys, num_keys, fn),
           chorus::capi::timeout_from_ms(timeout_ms, fn));
  });
}

chorus_result_t chorus_store_check(chorus_store_t* store, const char* const* keys, size_t num_keys,
                                   int* exists) {
  static const char* fn = "chorus_store_check";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(exists, fn, "exists (output)");
    *exists = s.check(chorus::capi::key_list(keys, num_keys, fn)) ? 1 : 0;
  });
}

chorus_result_t chorus_store_delete_key(chorus_store_t* store, const char* key, int* deleted) {
  static const char* fn = "chorus_store_delete_key";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(key, fn, "key");
    const bool d = s.delete_key(key);
    if (deleted != nullptr) {
      *deleted = d ? 1 : 0;
    }
  });
}

chorus_result_t chorus_store_num_keys(chorus_store_t* store, int64_t* num_keys) {
  static const char* fn = "chorus_store_num_keys";
  return guarded(fn, [&] {
    auto& s = chorus::capi::store_of(store, fn);
    require(num_keys, fn, "num_keys (output)");
    *num_keys = s.num_keys();
  });
}

chorus_result_t chorus_store_server_create(const chorus_store_server_config_t* config,
                                           chorus_store_server_t** server) {
  static const char* fn = "chorus_store_server_create";
  return guarded(fn, [&] {
    require(server, fn, "server (output)");
    *server = nullptr;
    const chorus_store_server_config_t defaults = CHORUS_STORE_SERVER_CONFIG_INITIALIZER;
    const auto c = chorus::capi::read_config(config, defaults, sizeof(chorus_store_server_config_t),
                                             fn, "CHORUS_STORE_SERVER_CONFIG_INITIALIZER");
    chorus::TcpStoreServerOptions options;
    options.host = c.host != nullptr ? c.host : "0.0.0.0";
    options.port = c.port;
    auto handle = std::make_unique<chorus_store_server>();
    handle->server = std::make_unique<chorus::TcpStoreServer>(options);
    *server = handle.release();
  });
}

uint16_t chorus_store_server_port(const chorus_store_server_t* server) {
  return server == nullptr ? 0 : server->server->port();
}

void chorus_store_server_free(chorus_store_server_t* server) { delete server; }

}  // extern "C"
