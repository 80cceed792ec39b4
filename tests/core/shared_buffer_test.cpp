// SPDX-License-Identifier: BSD-3-Clause
// SharedBuffer: allocation, the registry that says whether a tensor lies in one, moves, and
// the error when the memory cannot be had.
#include <sys/resource.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/shared_buffer.hpp>

#include "core/shared_regions.hpp"

namespace chorus::test {

TEST_CASE("SharedBuffer: zero-filled, page-aligned, and found by any view inside it",
          "[core][shared_buffer]") {
  SharedBuffer b(10'000);
  REQUIRE(b.data() != nullptr);
  CHECK(b.size() == 10'000);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);
  auto* bytes = static_cast<std::uint8_t*>(b.data());
  bool zero = true;
  for (std::size_t i = 0; i < b.size(); ++i) {
    zero = zero && bytes[i] == 0;
  }
  CHECK(zero);
  std::memset(bytes, 0x5a, b.size());  // writable

  CHECK(in_shared_buffer(bytes, b.size()));
  CHECK(in_shared_buffer(bytes + 100, 900));  // a slice
  CHECK(in_shared_buffer(bytes + 9'999, 1));
  // The mapping is whole pages: the tail of the last page belongs to it too.
  CHECK(in_shared_buffer(bytes, 3 * 4096));
  CHECK_FALSE(in_shared_buffer(bytes, 3 * 4096 + 1));  // runs past it
  CHECK_FALSE(in_shared_buffer(bytes - 1, 2));         // starts before it
  CHECK_FALSE(in_shared_buffer(nullptr, 0));
  int on_stack = 0;
  CHECK_FALSE(in_shared_buffer(&on_stack, sizeof on_stack));

  const auto region = find_shared_region(bytes + 5, 10);
  REQUIRE(region);
  CHECK(region->base == reinterpret_cast<std::uintptr_t>(bytes));
  CHECK(region->bytes == 3 * 4096);
  CHECK(region->fd >= 0);
  CHECK(region->inode != 0);
}

TEST_CASE("SharedBuffer: moves keep the memory registered; destruction forgets it",
          "[core][shared_buffer]") {
  SharedBuffer a(4096);
  void* p = a.data();
  SharedBuffer b(std::move(a));
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  CHECK(b.data() == p);
  CHECK(in_shared_buffer(p, 4096));
  SharedBuffer c(8192);
  void* q = c.data();
  c = std::move(b);  // c's own buffer is released
  CHECK(c.data() == p);
  CHECK_FALSE(in_shared_buffer(q, 1));
  CHECK(in_shared_buffer(p, 1));
  { SharedBuffer gone(std::move(c)); }
  CHECK_FALSE(in_shared_buffer(p, 1));
  SharedBuffer empty(0);
  CHECK(empty.data() == nullptr);
  CHECK(empty.size() == 0);
}

TEST_CASE("SharedBuffer: memory that cannot be had is a BackendError that says why",
          "[core][shared_buffer]") {
  try {
    SharedBuffer huge(std::numeric_limits<std::size_t>::max() / 2);
    FAIL("a buffer of half the address space was allocated");
  } catch (const BackendError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("SharedBuffer of") != std::string::npos);
    CHECK(std::string(e.what()).find("allocate less") != std::string::npos);
  }
  // Out of file descriptors: the message names the limit.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit none = old;
  none.rlim_cur = 0;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &none) == 0);
  std::string what;
  try {
    SharedBuffer b(4096);
  } catch (const BackendError& e) {
    what = e.what();
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old) == 0);
  INFO(what);
  CHECK(what.find("ulimit -n") != std::string::npos);
}

}  // namespace chorus::test
