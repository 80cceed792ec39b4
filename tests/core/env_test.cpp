// SPDX-License-Identifier: BSD-3-Clause
// Environment parsing: durations, CHORUS_TIMEOUT, CHORUS_DEBUG, integer launcher variables.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <chorus/errors.hpp>
#include <chorus/options.hpp>

#include "core/env.hpp"

using namespace chorus;
using namespace std::chrono_literals;

TEST_CASE("durations parse with and without units", "[core][env]") {
  REQUIRE(env::parse_duration("600") == Duration(600'000));
  REQUIRE(env::parse_duration("30s") == Duration(30'000));
  REQUIRE(env::parse_duration("500ms") == Duration(500));
  REQUIRE(env::parse_duration("10m") == Duration(600'000));
  REQUIRE(env::parse_duration("1h") == Duration(3'600'000));
  REQUIRE(env::parse_duration("1.5s") == Duration(1'500));
  REQUIRE_FALSE(env::parse_duration("soon").has_value());
  REQUIRE_FALSE(env::parse_duration("10 parsecs").has_value());
  REQUIRE_FALSE(env::parse_duration("-5").has_value());
}

TEST_CASE("durations are strict: no spaces, signs, hex, exponents or junk", "[core][env]") {
  REQUIRE(env::parse_duration("0") == Duration(0));
  REQUIRE(env::parse_duration("0.25s") == Duration(250));
  REQUIRE(env::parse_duration("90min") == Duration(5'400'000));
  for (const char* bad : {"0x10", "0x10s", " 30", "30 ", "30s ", "+30", "1e3", "inf", "nan", ".5",
                          "5.", "5.s", "1..5", "30ss", "", "s", "1e10", "99999999999"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(env::parse_duration(bad).has_value());
  }
}

TEST_CASE("integers are strict: the whole text in decimal digits", "[core][env]") {
  REQUIRE(env::parse_integer("0") == 0);
  REQUIRE(env::parse_integer("42") == 42);
  REQUIRE(env::parse_integer("-7") == -7);
  REQUIRE(env::parse_integer("007") == 7);
  for (const char* bad :
       {" 1", "1 ", "\t1", "+1", "0x10", "1a", "1.0", "", "-", "1e3", "99999999999999999999"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(env::parse_integer(bad).has_value());
  }
}

TEST_CASE("CHORUS_TIMEOUT sets the default and rejects bad values by name", "[core][env]") {
  unsetenv("CHORUS_TIMEOUT");
  REQUIRE(env::resolve_default_timeout() == kDefaultTimeout);
  setenv("CHORUS_TIMEOUT", "45s", 1);
  REQUIRE(env::resolve_default_timeout() == 45s);
  for (const char* bad : {"0x10", " 45s", "45s ", "1e2"}) {
    setenv("CHORUS_TIMEOUT", bad, 1);
    REQUIRE_THROWS_WITH(env::resolve_default_timeout(),
                        Catch::Contains(std::string("CHORUS_TIMEOUT='") + bad + "'"));
  }
  setenv("CHORUS_TIMEOUT", "forever", 1);
  try {
    env::resolve_default_timeout();
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("CHORUS_TIMEOUT='forever'"));
  }
  unsetenv("CHORUS_TIMEOUT");
}

TEST_CASE("CHORUS_PEER_TIMEOUT: default, durations, off, and a bad value named", "[core][env]") {
  unsetenv("CHORUS_PEER_TIMEOUT");
  REQUIRE(env::resolve_peer_timeout(std::nullopt) == kDefaultPeerTimeout);
  REQUIRE(env::resolve_peer_timeout(3s) == 3s);  // the group's option wins
  setenv("CHORUS_PEER_TIMEOUT", "2.5s", 1);
  REQUIRE(env::resolve_peer_timeout(std::nullopt) == 2500ms);
  for (const char* off : {"0", "off"}) {
    setenv("CHORUS_PEER_TIMEOUT", off, 1);
    REQUIRE(env::resolve_peer_timeout(std::nullopt) == Duration::zero());
  }
  setenv("CHORUS_PEER_TIMEOUT", "never", 1);
  REQUIRE_THROWS_WITH(env::resolve_peer_timeout(std::nullopt),
                      Catch::Contains("CHORUS_PEER_TIMEOUT='never'") && Catch::Contains("off"));
  unsetenv("CHORUS_PEER_TIMEOUT");
}

TEST_CASE("CHORUS_DEBUG accepts levels in any case and names a bad one", "[core][env]") {
  setenv("CHORUS_DEBUG", "info", 1);
  REQUIRE(env::debug_level() == LogLevel::info);
  setenv("CHORUS_DEBUG", "TRACE", 1);
  REQUIRE(env::debug_level() == LogLevel::trace);
  setenv("CHORUS_DEBUG", "VERBOSE", 1);
  REQUIRE_THROWS_WITH(env::debug_level(), Catch::Contains("CHORUS_DEBUG='VERBOSE'"));
  unsetenv("CHORUS_DEBUG");
  REQUIRE(env::debug_level() == LogLevel::warn);
}

TEST_CASE("integer variables are range-checked and name who sets them", "[core][env]") {
  setenv("RANK", "3", 1);
  REQUIRE(env::get_int("RANK", 0, 1000, "torchrun") == 3);
  setenv("RANK", "three", 1);
  REQUIRE_THROWS_WITH(env::get_int("RANK", 0, 1000, "torchrun"),
                      Catch::Contains("RANK='three'") && Catch::Contains("torchrun"));
  setenv("RANK", "-1", 1);
  REQUIRE_THROWS_AS(env::get_int("RANK", 0, 1000, "torchrun"), InvalidArgument);
  for (const char* bad : {" 1", "1 ", "+1", "0x1"}) {
    setenv("RANK", bad, 1);
    REQUIRE_THROWS_WITH(env::get_int("RANK", 0, 1000, "torchrun"),
                        Catch::Contains(std::string("RANK='") + bad + "'"));
  }
  unsetenv("RANK");
  REQUIRE_FALSE(env::get_int("RANK", 0, 1000, "torchrun").has_value());
}
