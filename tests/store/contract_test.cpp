// SPDX-License-Identifier: BSD-3-Clause
// The Store contract, run against every implementation: HashStore, FileStore, PrefixStore (over
// HashStore and over TcpStore) and TcpStore (embedded server).
#include <catch2/catch.hpp>

#include <limits>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>
#include <chorus/tcp_store.hpp>

#include "store/store_test_util.hpp"

using namespace std::chrono_literals;
using chorus::Bytes;
using chorus::Store;
using chorus::to_bytes;

namespace {

struct Fixture {
  std::unique_ptr<chorus::test::TempDir> dir;
  std::shared_ptr<Store> keepalive;  // e.g. the base of a prefix store
  std::shared_ptr<Store> store;
};

Fixture make(const std::string& kind) {
  Fixture f;
  if (kind == "hash") {
    f.store = chorus::make_hash_store(10s);
  } else if (kind == "file") {
    f.dir = std::make_unique<chorus::test::TempDir>();
    f.store = chorus::make_file_store(f.dir->path() + "/sub/dir", 10s);
  } else if (kind == "prefix(hash)") {
    f.keepalive = chorus::make_hash_store(10s);
    f.keepalive->set("outside", std::string_view("x"));
    f.store = chorus::make_prefix_store("grp", f.keepalive);
  } else if (kind == "tcp" || kind == "prefix(tcp)") {
    chorus::TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.is_server = true;
    o.timeout = 10s;
    auto tcp = std::make_shared<chorus::TcpStore>(o);
    if (kind == "tcp") {
      f.store = tcp;
    } else {
      f.keepalive = tcp;
      f.store = chorus::make_prefix_store("grp", tcp);
    }
  }
  return f;
}

void contract(const std::string& kind) {
  Fixture f = make(kind);
  Store& s = *f.store;
  INFO("store: " << kind);

  SECTION("set/get round trip, overwrite, binary and empty values") {
    s.set("a", std::string_view("hello"));
    REQUIRE(s.get_string("a") == "hello");
    s.set("a", std::string_view("world"));
    REQUIRE(s.get_string("a") == "world");
    const Bytes binary = {0, 1, 2, 255, 0, 10, 13};
    s.set("bin", binary);
    REQUIRE(s.get("bin") == binary);
    s.set("empty", Bytes{});
    REQUIRE(s.get("empty").empty());
    REQUIRE(s.check({"empty"}));
    s.set("weird/key with spaces%", std::string_view("v"));
    REQUIRE(s.get_string("weird/key with spaces%") == "v");
  }

  SECTION("get waits for a set from another thread") {
    REQUIRE_FALSE(s.check({"late"}));
    std::thread setter([&] { s.set("late", std::string_view("arrived")); });
    REQUIRE(s.get_string("late", 10s) == "arrived");
    setter.join();
  }

  SECTION("get times out, not long after its deadline, naming the key") {
    const auto start = chorus::Clock::now();
    try {
      s.get("never-set", 200ms);
      FAIL("get returned a value for a key never set");
    } catch (const chorus::TimeoutError& e) {
      REQUIRE(std::string(e.what()).find("never-set") != std::string::npos);
    }
    REQUIRE(chorus::test::since(start) < 200ms + chorus::test::kSlack);
  }

  SECTION("the default timeout applies when none is given") {
    s.set_default_timeout(150ms);
    const auto start = chorus::Clock::now();
    REQUIRE_THROWS_AS(s.get("never-set"), chorus::TimeoutError);
    REQUIRE_THROWS_AS(s.wait({"never-set"}), chorus::TimeoutError);
    REQUIRE(chorus::test::since(start) < 300ms + 2 * chorus::test::kSlack);
  }

  SECTION("add is a counter: missing is 0, returns the new value, rejects non-integers") {
    REQUIRE(s.add("c", 5) == 5);
    REQUIRE(s.add("c", -7) == -2);
    REQUIRE(s.add("c", 0) == -2);
    REQUIRE(s.get_string("c") == "-2");
    s.set("text", std::string_view("abc"));
    REQUIRE_THROWS_AS(s.add("text", 1), chorus::StoreError);
    REQUIRE(s.get_string("text") == "abc");
  }

  SECTION("add past the int64 range is an error that says so, and changes nothing") {
    const auto max = std::numeric_limits<std::int64_t>::max();
    REQUIRE(s.add("big", max) == max);
    REQUIRE_THROWS_WITH(s.add("big", 1), Catch::Contains("int64"));
    REQUIRE(s.get_string("big") == std::to_string(max));
    REQUIRE(s.add("small", -max) == -max);
    REQUIRE(s.add("small", -1) == -max - 1);
    REQUIRE_THROWS_AS(s.add("small", -1), chorus::StoreError);
    REQUIRE(s.add("small", max) == -1);
  }

  SECTION("add from 8 threads keeps an exact count") {
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 100; ++i) {
          s.add("shared", 1);
        }
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    REQUIRE(s.add("shared", 0) == 800);
  }

  SECTION("compare_set") {
    // Missing key: an empty expected value creates it.
    REQUIRE(chorus::to_string(s.compare_set("cs", {}, to_bytes("one"))) == "one");
    // Missing key with a non-empty expected value: nothing is stored.
    REQUIRE(s.compare_set("cs-missing", to_bytes("x"), to_bytes("y")).empty());
    REQUIRE_FALSE(s.check({"cs-missing"}));
    // Match: swapped.
    REQUIRE(chorus::to_string(s.compare_set("cs", to_bytes("one"), to_bytes("two"))) == "two");
    // Mismatch: returns the current value, unchanged.
    REQUIRE(chorus::to_string(s.compare_set("cs", to_bytes("one"), to_bytes("three"))) == "two");
    REQUIRE(s.get_string("cs") == "two");
  }

  SECTION("wait, check") {
    REQUIRE(s.check({}));
    REQUIRE_FALSE(s.check({"w1"}));
    s.set("w1", std::string_view("1"));
    REQUIRE(s.check({"w1"}));
    REQUIRE_FALSE(s.check({"w1", "w2"}));
    std::thread setter([&] { s.set("w2", std::string_view("2")); });
    s.wait({"w1", "w2"}, 10s);
    setter.join();
    REQUIRE(s.check({"w1", "w2"}));
    const auto start = chorus::Clock::now();
    try {
      s.wait({"w1", "w3"}, 200ms);
      FAIL("wait returned although w3 was never set");
    } catch (const chorus::TimeoutError& e) {
      REQUIRE(std::string(e.what()).find("w3") != std::string::npos);
    }
    REQUIRE(chorus::test::since(start) < 200ms + chorus::test::kSlack);
  }

  SECTION("delete_key, num_keys") {
    const auto before = s.num_keys();
    s.set("d1", std::string_view("1"));
    s.set("d2", std::string_view("2"));
    s.add("d3", 1);
    REQUIRE(s.num_keys() == before + 3);
    REQUIRE(s.delete_key("d1"));
    REQUIRE_FALSE(s.delete_key("d1"));
    REQUIRE_FALSE(s.check({"d1"}));
    REQUIRE(s.num_keys() == before + 2);
    // A deleted key can be waited for again and set again.
    std::thread setter([&] { s.set("d1", std::string_view("again")); });
    REQUIRE(s.get_string("d1", 10s) == "again");
    setter.join();
  }

  SECTION("multi_set, multi_get") {
    s.multi_set({"m1", "m2", "m3"}, {to_bytes("a"), to_bytes("bb"), Bytes{}});
    const auto values = s.multi_get({"m3", "m1", "m2"});
    REQUIRE(values.size() == 3);
    REQUIRE(values[0].empty());
    REQUIRE(chorus::to_string(values[1]) == "a");
    REQUIRE(chorus::to_string(values[2]) == "bb");
    REQUIRE(s.multi_get({}).empty());
    REQUIRE_THROWS_AS(s.multi_set({"x", "y"}, {to_bytes("1")}), chorus::InvalidArgument);
    std::thread setter([&] { s.set("m4", std::string_view("late")); });
    REQUIRE(chorus::to_string(s.multi_get({"m1", "m4"}, 10s)[1]) == "late");
    setter.join();
    const auto start = chorus::Clock::now();
    REQUIRE_THROWS_AS(s.multi_get({"m1", "m-missing"}, 200ms), chorus::TimeoutError);
    REQUIRE(chorus::test::since(start) < 200ms + chorus::test::kSlack);
  }

  SECTION("get_with waits for its key only and reads the others as they are then") {
    s.set("gw-other", std::string_view("o"));
    std::thread setter([&] { s.set("gw-key", std::string_view("k")); });
    const chorus::KeyWithOthers got =
        s.get_with("gw-key", {"gw-other", "gw-absent", "gw-key"}, 10s);
    setter.join();
    REQUIRE(chorus::to_string(got.value) == "k");
    REQUIRE(got.others.size() == 3);
    REQUIRE(got.others[0].has_value());
    REQUIRE(chorus::to_string(*got.others[0]) == "o");
    REQUIRE_FALSE(got.others[1].has_value());
    REQUIRE(got.others[2].has_value());
    REQUIRE(chorus::to_string(*got.others[2]) == "k");
    REQUIRE(s.get_with("gw-key", {}).others.empty());
    const auto start = chorus::Clock::now();
    try {
      (void)s.get_with("gw-missing", {"gw-other", "gw-absent"}, 200ms);
      FAIL("get_with of a missing key returned");
    } catch (const chorus::TimeoutError& e) {
      // It names the key it waited for, not the others (which it never waits for).
      REQUIRE(std::string(e.what()).find("gw-missing") != std::string::npos);
      REQUIRE(std::string(e.what()).find("gw-absent") == std::string::npos);
    }
    REQUIRE(chorus::test::since(start) < 200ms + chorus::test::kSlack);
  }

  SECTION("append") {
    s.append("ap", to_bytes("ab"));
    s.append("ap", to_bytes("cd"));
    REQUIRE(s.get_string("ap") == "abcd");
  }

  SECTION("a waiter is woken by set, add and multi_set alike") {
    std::thread t1([&] { s.add("wake-add", 1); });
    std::thread t2([&] { s.multi_set({"wake-ms"}, {to_bytes("v")}); });
    s.wait({"wake-add", "wake-ms"}, 10s);
    t1.join();
    t2.join();
  }
}

}  // namespace

TEST_CASE("HashStore honours the Store contract", "[store]") { contract("hash"); }
TEST_CASE("FileStore honours the Store contract", "[store]") { contract("file"); }
TEST_CASE("PrefixStore over HashStore honours the Store contract", "[store]") {
  contract("prefix(hash)");
}
TEST_CASE("TcpStore honours the Store contract", "[store]") { contract("tcp"); }
TEST_CASE("PrefixStore over TcpStore honours the Store contract", "[store]") {
  contract("prefix(tcp)");
}

TEST_CASE("PrefixStore namespaces keys on its base store", "[store]") {
  auto base = chorus::make_hash_store(5s);
  auto a = chorus::make_prefix_store("a", base);
  auto b = chorus::make_prefix_store("b", base);
  a->set("k", std::string_view("from a"));
  b->set("k", std::string_view("from b"));
  REQUIRE(a->get_string("k") == "from a");
  REQUIRE(b->get_string("k") == "from b");
  REQUIRE(base->get_string("a/k") == "from a");
  REQUIRE_FALSE(base->check({"k"}));
  REQUIRE(a->num_keys() == 2);  // counts the whole underlying store, as documented
  REQUIRE_THROWS_AS(chorus::make_prefix_store("x", nullptr), chorus::InvalidArgument);
}

TEST_CASE("FileStore: two store objects on one directory see each other", "[store]") {
  chorus::test::TempDir dir;
  auto s1 = chorus::make_file_store(dir.path(), 5s);
  auto s2 = chorus::make_file_store(dir.path(), 5s);
  std::thread setter([&] { s1->set("k", std::string_view("v")); });
  REQUIRE(s2->get_string("k") == "v");
  setter.join();
  // Long keys are hashed into file names and still work.
  const std::string long_key(3000, 'z');
  s1->set(long_key, std::string_view("long"));
  REQUIRE(s2->get_string(long_key) == "long");
  REQUIRE(s2->num_keys() == 2);
}
