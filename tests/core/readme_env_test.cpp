// SPDX-License-Identifier: BSD-3-Clause
// The README's environment table names every variable chorus::environment_help() prints, so the
// documentation cannot drift from what the library reads.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <chorus/logging.hpp>

TEST_CASE("README lists every environment variable chorus reads", "[core][docs]") {
  const char* path = std::getenv("CHORUS_README");
  REQUIRE(path != nullptr);
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream readme;
  readme << in.rdbuf();
  const std::string text = readme.str();

  const std::string help = chorus::environment_help();
  const std::regex variable(R"(\b[A-Z][A-Z0-9]*(_[A-Z0-9]+)+\b)");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(help.begin(), help.end(), variable);
       it != std::sregex_iterator(); ++it) {
    names.insert(it->str());
  }
  REQUIRE(names.size() > 20);
  for (const auto& name : names) {
    INFO("variable " << name << " is printed by environment_help() but missing from README.md");
    CHECK(text.find("`" + name + "`") != std::string::npos);
  }
}
