// SPDX-License-Identifier: BSD-3-Clause
// FlightRecorder's ring and the dump format, and chorus-trace's analysis on hand-made dumps
// (the real failing runs are in tests/tcp/trace_mp_test.cpp).
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/logging.hpp>

#include "core/flight_recorder.hpp"
#include "core/trace_dump.hpp"
#include "trace_report.hpp"

namespace chorus {
namespace {

TraceEntry op(std::uint64_t seq, const char* name = "allreduce", std::uint64_t count = 4) {
  TraceEntry e;
  e.seq = seq;
  e.op = name;
  e.dtype = DataType::float32;
  e.count = count;
  e.bytes = count * 4;
  return e;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the flight recorder keeps the last ops in issue order and ignores overwritten ones",
          "[core][trace]") {
  FlightRecorder rec({.name = "world", .backend = "tcp", .rank = 1, .size = 4}, 3);
  std::vector<std::uint64_t> records;
  for (std::uint64_t seq = 1; seq <= 5; ++seq) {
    records.push_back(rec.issued(op(seq)));
  }
  rec.started(records[0], "ring");  // seq 1 was overwritten: no effect
  rec.started(records[4], "ring");
  rec.ended(records[3], nullptr);
  rec.ended(records[4], std::make_exception_ptr(std::runtime_error("boom\nsecond line")));
  const TraceSnapshot s = rec.snapshot();
  REQUIRE(s.recorded == 5);
  REQUIRE(s.entries.size() == 3);
  CHECK(s.entries[0].seq == 3);
  CHECK(s.entries[0].state == TraceState::issued);
  CHECK(s.entries[1].state == TraceState::completed);
  CHECK(s.entries[2].state == TraceState::failed);
  CHECK(std::string(s.entries[2].algorithm) == "ring");
  CHECK(s.entries[2].error == "boom");
  CHECK(s.entries[2].started_us >= s.entries[2].issued_us);
  CHECK(s.entries[2].ended_us >= s.entries[2].started_us);
}

TEST_CASE("ops run inline, recorded late and ended with one store, land in their own entries",
          "[core][trace]") {
  // The pattern of small ops run on the issuing thread (each ends before the next is issued):
  // the number first, the entry once the op started, its end published without the lock.
  FlightRecorder rec({.name = "world", .backend = "tcp", .rank = 0, .size = 2}, 3);
  for (std::uint64_t seq = 1; seq <= 8; ++seq) {
    const std::uint64_t record = rec.next_record();
    CHECK(record == seq);
    const Clock::time_point issued = Clock::now();
    rec.issued_as(record, op(seq), issued, "board");
    if (seq == 4) {  // a dump taken while it waits for its peers
      const TraceSnapshot waiting = rec.snapshot();
      CHECK(waiting.entries.back().record == 4);
      CHECK(waiting.entries.back().state == TraceState::started);
      CHECK(waiting.entries.back().started_us == waiting.entries.back().issued_us);
      CHECK(waiting.entries.back().ended_us == 0);
    }
    rec.ended_latest(record, issued, Clock::now());
    if (seq == 5) {  // a dump taken after its end, before the next issue
      const TraceSnapshot done = rec.snapshot();
      CHECK(done.entries.back().record == 5);
      CHECK(done.entries.back().state == TraceState::completed);
      CHECK(done.entries.back().ended_us >= done.entries.back().started_us);
    }
  }
  const TraceSnapshot s = rec.snapshot();
  REQUIRE(s.entries.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(s.entries[i].seq == 6 + i);
    CHECK(s.entries[i].record == 6 + i);
    CHECK(s.entries[i].state == TraceState::completed);  // 6 and 7 folded by the next issue
    CHECK(std::string(s.entries[i].algorithm) == "board");
    CHECK(s.entries[i].ended_us >= s.entries[i].started_us);
  }
}

TEST_CASE("an inline end keeps the offset from its issue, clamped, and only for the latest op",
          "[core][trace]") {
  FlightRecorder rec({.name = "world", .backend = "tcp", .rank = 0, .size = 2}, 4);
  const Clock::time_point t0 = Clock::now();
  const std::uint64_t first = rec.issued(op(1), t0);
  const std::uint64_t second = rec.issued(op(2), t0);
  rec.ended_latest(first, t0, t0);  // not the latest: recorded through the lock at once
  {
    const TraceSnapshot s = rec.snapshot();
    CHECK(s.entries[0].state == TraceState::completed);
    CHECK(s.entries[1].state == TraceState::issued);
  }
  // An issue stamp 10 s ahead of the end (a clock that stepped back): ends at its issue.
  const Clock::time_point ahead = Clock::now() + std::chrono::seconds(10);
  const std::uint64_t third = rec.next_record();
  rec.issued_as(second, op(3), ahead, "board");  // not next_record(): ignored
  CHECK(rec.next_record() == third);
  rec.issued_as(third, op(3), ahead, nullptr);
  rec.ended_latest(third, ahead, Clock::now());
  rec.ended_latest(third, ahead, Clock::now());  // twice: the same end
  const std::uint64_t fourth = rec.issued(op(4));
  rec.ended(fourth, std::make_exception_ptr(std::runtime_error("late")));
  const TraceSnapshot s = rec.snapshot();
  REQUIRE(s.entries.size() == 4);
  CHECK(s.entries[2].record == third);
  CHECK(s.entries[2].state == TraceState::completed);
  CHECK(std::string(s.entries[2].algorithm).empty());
  CHECK(s.entries[2].ended_us == s.entries[2].issued_us);
  CHECK(s.entries[3].state == TraceState::failed);  // an earlier inline end leaves it alone
  CHECK(s.entries[1].state == TraceState::issued);
  // An end 3 ms after the issue keeps that offset (to the microsecond).
  FlightRecorder later({.name = "world"}, 2);
  const Clock::time_point issued = Clock::now() - std::chrono::milliseconds(3);
  const std::uint64_t record = later.next_record();
  later.issued_as(record, op(1), issued, "board");
  const std::int64_t before_us = trace_now_us();
  later.ended_latest(record, issued, Clock::now());
  const TraceEntry e = later.snapshot().entries.back();
  CHECK(e.ended_us - e.issued_us >= 3000);
  CHECK(e.ended_us - e.issued_us < 3000 + (trace_now_us() - before_us) + 2000);
}

TEST_CASE("a recorder of capacity 0 records nothing", "[core][trace]") {
  FlightRecorder rec({.name = "world"}, 0);
  CHECK_FALSE(rec.enabled());
  CHECK(rec.issued(op(1)) == 0);
  rec.ended(0, nullptr);
  CHECK(rec.snapshot().entries.empty());
}

TEST_CASE("a group's first failure is kept, with the ranks it names", "[core][trace]") {
  FlightRecorder rec({.name = "world"}, 8);
  rec.group_failed(std::make_exception_ptr(
      TimeoutError("first\nmore", ErrorContext{.rank = 0, .size = 3, .peers = {2, 1}})));
  rec.group_failed(std::make_exception_ptr(std::runtime_error("second")));
  const TraceSnapshot s = rec.snapshot();
  CHECK(s.failure == "first");
  CHECK(s.failure_peers == std::vector<int>{2, 1});
  const auto views = trace_tool::parse_dump(trace::to_json({s}, "timeout"), "rank0.json");
  REQUIRE(views.size() == 1);
  CHECK(views[0].failure_peers == std::vector<int>{2, 1});
}

TEST_CASE("a dump parses back into what was recorded", "[core][trace]") {
  FlightRecorder rec({.name = "world", .backend = "tcp", .rank = 2, .size = 3}, 8);
  TraceEntry send = op(7, "send");
  send.p2p = true;
  send.peer = 1;
  send.tag = 9;
  const auto r1 = rec.issued(op(1, "broadcast"));
  rec.issued(send);
  rec.ended(r1, nullptr);
  const std::string text = trace::to_json({rec.snapshot()}, "SIGUSR1");
  const auto views = trace_tool::parse_dump(text, "rank2.json");
  REQUIRE(views.size() == 1);
  const auto& v = views[0];
  CHECK(v.name == "world");
  CHECK(v.rank == 2);
  CHECK(v.size == 3);
  CHECK(v.reason == "SIGUSR1");
  REQUIRE(v.ops.size() == 2);
  CHECK(v.ops[0].op == "broadcast");
  CHECK(v.ops[0].state == "completed");
  CHECK(v.ops[0].dtype == "float32");
  CHECK(v.ops[1].p2p);
  CHECK(v.ops[1].peer == 1);
  CHECK(v.ops[1].root == -1);
  CHECK_THROWS(trace_tool::parse_dump("{\"hello\": 1}", "x.json"));
  CHECK_THROWS(trace_tool::parse_dump("not json", "x.json"));
}

TEST_CASE("chorus-trace's report: first failure, missing ranks, ranks behind, mismatches",
          "[core][trace]") {
  auto view = [](int rank, std::vector<std::pair<std::uint64_t, std::string>> ops) {
    trace_tool::GroupView v;
    v.name = "world";
    v.rank = rank;
    v.size = 4;
    v.host = "h";
    std::int64_t t = 1000;
    for (auto& [seq, name] : ops) {
      trace_tool::OpRecord o;
      o.seq = seq;
      o.op = name;
      o.dtype = "float32";
      o.count = 4;
      o.state = "completed";
      o.issued_us = t;
      t += 1000;
      v.ops.push_back(o);
    }
    return v;
  };
  auto r0 = view(0, {{1, "allreduce"}, {2, "allreduce"}, {3, "allreduce"}});
  auto r1 = view(1, {{1, "allreduce"}, {2, "allreduce"}});
  auto r2 = view(2, {{1, "allreduce"}, {2, "allreduce"}, {3, "allgather"}});
  r0.failure = "allreduce (seq 3) timed out";
  r0.failure_us = 5000;
  r2.failure = "later";
  r2.failure_us = 9000;
  const std::string report = trace_tool::report({r0, r1, r2}, 2);
  INFO(report);
  CHECK(has(report, "group 'world' (4 ranks): dumps from 3 of them"));
  CHECK(has(report, "first failure: rank 0 (h pid 0): allreduce (seq 3) timed out"));
  CHECK(has(report, "never reported: rank 3 "));
  CHECK(has(report, "behind: rank 1 last issued collective seq 2, the others reached seq 3"));
  CHECK(has(report,
            "mismatch at seq 3: rank 2: allgather 4 x float32; rank 0: allreduce 4 x "
            "float32"));
  CHECK(has(report, "last 2 ops per rank"));
}

namespace {

// A private folder standing in for the system temp directory, removed at the end.
struct TempRoot {
  std::string path;
  TempRoot() {
    char templ[] = "/tmp/chorus-trace-dir-test-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    path = templ;
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("the default trace directory is used only if it is this uid's own and private",
          "[core][trace]") {
  TempRoot root;
  std::string why;
  SECTION("made fresh: private, used") {
    const std::string dir = root.path + "/fresh";
    const int fd = trace::open_dump_directory(dir, true, why);
    REQUIRE(fd >= 0);
    ::close(fd);
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }
  SECTION("already there with mode 0777: refused, naming the mode") {
    const std::string dir = root.path + "/open";
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    CHECK(trace::open_dump_directory(dir, true, why) < 0);
    CHECK(has(why, "writable by every user (mode 0777)"));
    // CHORUS_TRACE_DIR is the user's choice: used as it is.
    const int fd = trace::open_dump_directory(dir, false, why);
    CHECK(fd >= 0);
    ::close(fd);
  }
  SECTION("a symlink planted where the directory goes: refused") {
    const std::string target = root.path + "/elsewhere";
    REQUIRE(::mkdir(target.c_str(), 0700) == 0);
    const std::string dir = root.path + "/link";
    REQUIRE(::symlink(target.c_str(), dir.c_str()) == 0);
    CHECK(trace::open_dump_directory(dir, true, why) < 0);
    CHECK(has(why, "symbolic link"));
  }
  SECTION("already there, owned by another user: refused, naming the owner") {
    if (::geteuid() != 0) {
      WARN(
          "skipped: giving a directory to another user (chown) needs root; run as root (CI "
          "does) to check the owner test");
      return;
    }
    const passwd* nobody = ::getpwnam("nobody");
    const uid_t other = nobody != nullptr ? nobody->pw_uid : 65534;
    const std::string dir = root.path + "/theirs";
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chown(dir.c_str(), other, static_cast<gid_t>(-1)) == 0);
    CHECK(trace::open_dump_directory(dir, true, why) < 0);
    CHECK(has(why, "belongs to uid " + std::to_string(other) + ", not to this process's uid 0"));
  }
}

TEST_CASE("a refused default trace directory gets one WARN saying what, why and what to do",
          "[core][trace]") {
  TempRoot root;
  const std::string run = "dir-test-" + std::to_string(::getpid());
  ::setenv("TMPDIR", root.path.c_str(), 1);
  ::setenv("CHORUS_RUN_ID", run.c_str(), 1);
  ::unsetenv("CHORUS_TRACE_DIR");
  const std::string dir = trace::directory();
  REQUIRE(dir == root.path + "/chorus-trace-" + std::to_string(::getuid()) + "-" + run);
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);

  std::vector<std::string> warnings;
  std::mutex mu;
  set_log_sink([&](LogLevel level, std::string_view line) {
    if (level == LogLevel::warn && line.find("flight recorder") != std::string_view::npos) {
      const std::lock_guard lock(mu);
      warnings.emplace_back(line);
    }
  });
  auto rec = std::make_shared<FlightRecorder>(TraceGroup{.name = "world"}, 8);
  rec->issued(op(1));
  trace::register_recorder(rec);
  CHECK(trace::dump_all("test").empty());
  CHECK(trace::dump_all("test again").empty());
  set_log_sink(nullptr);
  ::unsetenv("TMPDIR");
  ::unsetenv("CHORUS_RUN_ID");
  CHECK(std::filesystem::is_empty(dir));
  REQUIRE(warnings.size() == 1);
  CHECK(has(warnings[0], "not writing dumps into " + dir));
  CHECK(has(warnings[0], "writable by every user (mode 0777)"));
  CHECK(has(warnings[0], "another user could replace or remove them"));
  CHECK(has(warnings[0], "Set CHORUS_TRACE_DIR"));
}

}  // namespace chorus
