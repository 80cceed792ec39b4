// SPDX-License-Identifier: BSD-3-Clause
// C ABI: SharedBuffers handed out as plain pointers; the buffers live here until freed.
#include "capi/capi.hpp"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include <chorus/shared_buffer.hpp>

namespace {

struct Live {
  std::mutex mutex;
  std::map<void*, chorus::SharedBuffer> by_data;
};

Live& live() {
  static Live* l = new Live;  // never destroyed: C callers may free at exit
  return *l;
}

}  // namespace

extern "C" {

chorus_result_t chorus_shared_buffer_alloc(size_t bytes, void** out) {
  return chorus::capi::guarded("chorus_shared_buffer_alloc", [&] {
    chorus::capi::require(out, "chorus_shared_buffer_alloc", "out");
    *out = nullptr;
    chorus::SharedBuffer b(bytes);
    if (b.data() == nullptr) {
      return;  // 0 bytes
    }
    void* p = b.data();
    std::lock_guard<std::mutex> lock(live().mutex);
    live().by_data.emplace(p, std::move(b));
    *out = p;
  });
}

chorus_result_t chorus_shared_buffer_free(void* data) {
  return chorus::capi::guarded("chorus_shared_buffer_free", [&] {
    if (data == nullptr) {
      return;
    }
    chorus::SharedBuffer gone;  // released outside the lock
    {
      std::lock_guard<std::mutex> lock(live().mutex);
      auto it = live().by_data.find(data);
      if (it == live().by_data.end()) {
        throw chorus::InvalidArgument(fmt::format(
            "chorus_shared_buffer_free: {} was not returned by chorus_shared_buffer_alloc (or "
            "was freed already)",
            data));
      }
      gone = std::move(it->second);
      live().by_data.erase(it);
    }
  });
}

}  // extern "C"
