// SPDX-License-Identifier: BSD-3-Clause
// Group setup against hostile or careless surroundings, over real processes and a real store:
// strangers on a rank's port, a duplicate RANK, a different WORLD_SIZE, a relaunch over an
// earlier launch's records, and no store keys left behind by destroyed groups.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "cpu/bootstrap/formation_records.hpp"
#include "cpu/bootstrap/membership.hpp"
#include "net/address.hpp"
#include "tcp/mp_common.hpp"

namespace chorus::test {
namespace {

// Sum of a one-element allreduce where rank r contributes `base + r`.
float allreduce_one(ProcessGroup& pg, float value) {
  float x = value;
  pg.allreduce(Tensor::of(&x, 1))->wait();
  return x;
}

// Rank r's "host:port" in the group's current formation (the layout of
// cpu/bootstrap/membership.hpp): the address in its claim record.
std::string current_address(Store& group_ns, int rank, Duration timeout) {
  // `current` is "<epoch> <leader record>".
  std::string epoch = group_ns.get_string(cpu::kCurrentEpochKey, timeout);
  epoch = epoch.substr(0, epoch.find(' '));
  const std::string record = group_ns.get_string(cpu::formation::claim_key(epoch, rank), timeout);
  return cpu::formation::parse_claim(record).value_or(cpu::formation::Claim{}).address;
}

int connect_loopback(const std::string& address) {
  const net::HostPort hp = net::parse_host_port(address);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    throw ChildCheckFailed{"stranger could not connect to " + address};
  }
  return fd;
}

bool failed_with(const ChildResult& r, ErrorCode code, const std::string& part) {
  return r.exited && r.exit_code == kChildChorusError + static_cast<int>(code) &&
         contains(r.message, part);
}

}  // namespace

// Rank 2's port gets 10 strangers (7 silent, 3 sending garbage) before rank 1 even starts, so
// rank 1's connections queue behind them. The hello deadline is 10 minutes, far past this
// test's bound: the group can only form if setup never waits on a stranger's hello.
TEST_CASE("group setup does not wait on strangers connected to a rank's port",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      4,
      [port](int who) {
        auto base = child_store(port);
        auto ns = make_prefix_store("job", base);
        TcpGroupOptions options = loopback_options(60s);
        options.hello_timeout = std::chrono::minutes(10);
        if (who == 3) {  // the strangers
          const std::string target = current_address(*make_prefix_store("tcp/g1", ns), 2, 30s);
          std::vector<int> fds;
          for (int i = 0; i < 10; ++i) {
            fds.push_back(connect_loopback(target));
          }
          const char garbage[] = "GET / HTTP/1.0\r\n\r\n";
          CHILD_CHECK(::write(fds[0], garbage, sizeof(garbage) - 1) > 0);
          const std::vector<std::uint8_t> zeros(40, 0);  // a full hello's worth of nonsense
          CHILD_CHECK(::write(fds[1], zeros.data(), zeros.size()) > 0);
          CHILD_CHECK(::write(fds[2], "CHTC", 4) > 0);  // a hello cut short, then silence
          base->set("go", std::string_view("1"));
          base->get("done", 60s);  // stay connected until the group has formed and worked
          for (int fd : fds) {
            ::close(fd);
          }
          return;
        }
        if (who == 1) {
          base->get("go", 60s);
        }
        const auto t0 = Clock::now();
        auto pg = make_tcp_group(ns, who, 3, options);
        if (who == 1) {  // the last to join: its setup time is the group's, strangers and all
          std::fprintf(stderr, "setup with 10 strangers on rank 2's port: %.3f s\n",
                       seconds_since(t0));
        }
        CHILD_CHECK(allreduce_one(*pg, 1.0f) == 3.0f);
        if (who == 1) {
          base->set("done", std::string_view("1"));
        }
      },
      60s);
  REQUIRE_ALL_OK(results);
}

// A stranger who learned the group id (not the formation's secret, which only the store holds)
// sends a well-formed hello claiming rank 1 to rank 2 before rank 1 connects. Rank 2 answers,
// finds no valid membership proof and closes that connection; the real rank 1's link is made
// beside it, the group forms and computes the right sum, and the stranger never receives a
// byte beyond the handshake answer.
TEST_CASE("a hello without the formation's membership proof never joins the group",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      4,
      [port](int who) {
        auto base = child_store(port);
        auto ns = make_prefix_store("job", base);
        TcpGroupOptions options = loopback_options(30s);
        if (who == 3) {  // the stranger
          auto group_ns = make_prefix_store("tcp/g1", ns);
          const std::string target = current_address(*group_ns, 2, 30s);
          // `current` is "<epoch> <world size> <group id> ...".
          std::istringstream leader(group_ns->get_string(cpu::kCurrentEpochKey, 30s));
          std::string epoch;
          int size = 0;
          std::string id_hex;
          leader >> epoch >> size >> id_hex;
          const auto open = cpu::make_open(
              {std::stoull(id_hex, nullptr, 16), 1, 2, 0, 2, static_cast<std::uint32_t>(size)});
          const int fd = connect_loopback(target);
          CHILD_CHECK(::write(fd, open.data(), open.size()) == static_cast<ssize_t>(open.size()));
          base->set("go", std::string_view("1"));  // rank 1 connects after the impostor
          // Rank 2 answers once its group has formed (its link connector runs).
          std::uint8_t answer[cpu::kAnswerBytes];
          std::size_t got = 0;
          while (got < sizeof answer) {
            const ssize_t k = ::read(fd, answer + got, sizeof answer - got);
            CHILD_CHECK(k > 0);
            got += static_cast<std::size_t>(k);
          }
          const std::vector<std::uint8_t> forged(net::kMacBytes, 0x5a);
          CHILD_CHECK(::write(fd, forged.data(), forged.size()) > 0);
          std::uint8_t byte = 0;
          CHILD_CHECK(::read(fd, &byte, 1) <= 0);  // closed on the wrong proof, nothing sent
          ::close(fd);
          return;
        }
        if (who == 1) {
          base->get("go", 60s);
        }
        auto pg = make_tcp_group(ns, who, 3, options);
        CHILD_CHECK(allreduce_one(*pg, 1.0f) == 3.0f);
      },
      60s);
  REQUIRE_ALL_OK(results);
}

// Rank 1 is SIGKILLed after publishing its address, before rank 2 starts. With a 60 s group
// timeout, ranks 0 and 2 must name rank 1 as gone within a few seconds (rank 0 when its
// connect is refused or reset; rank 2 from its once-a-second probe of the ranks that have not
// connected, or from rank 0's record of the death), and blame no live rank. Rank 0 leaves (and
// removes its address) while rank 2 still waits for it: rank 2 must neither wait for that
// address nor blame rank 0.
TEST_CASE("a rank that dies after publishing its address is named at once, not at the timeout",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      4,
      [port](int who) {
        auto base = child_store(port);
        auto ns = make_prefix_store("job", base);
        if (who == 3) {  // the killer
          auto group_ns = make_prefix_store("tcp/g1", ns);
          (void)current_address(*group_ns, 1, 30s);
          // A rank claims (publishing its address) and then counts itself in: killed between
          // the two it would be a rank that never joined, which only the timeout names. Rank 2
          // starts after the kill, so a count of 2 is ranks 0 and 1.
          std::string epoch = group_ns->get_string(cpu::kCurrentEpochKey, 30s);
          epoch = epoch.substr(0, epoch.find(' '));
          const Deadline counted = Deadline::after(30s);
          while (group_ns->add(cpu::epoch_key(epoch, "joined"), 0) < 2) {
            CHILD_CHECK(!counted.expired());
            std::this_thread::sleep_for(1ms);  // polling an observable condition
          }
          const auto pid = std::stoi(base->get_string("pid/1", 30s));
          ::kill(pid, SIGKILL);
          base->set("killed", std::string_view("1"));
          return;
        }
        if (who == 1) {
          base->set("pid/1", std::to_string(::getpid()));
        }
        if (who == 2) {
          base->get("killed", 30s);
        }
        const auto t0 = Clock::now();
        try {
          auto pg = make_tcp_group(ns, who, 3, loopback_options(60s));
        } catch (const NetworkError& e) {
          if (e.context().peers != std::vector<int>{1}) {
            throw ChildCheckFailed{std::string("blames the wrong rank: ") + e.what()};
          }
          // Refused at its published address, or (rank 0, if it dialed rank 1 just before the
          // kill) reset during the handshake; rank 2 may read either from the store.
          const bool refused = contains(e.what(), "rank 1 published its address") &&
                               contains(e.what(), "stopped listening");
          const bool reset =
              contains(e.what(), "rank 1 at") && contains(e.what(), "closed the connection");
          if (!refused && !reset) {
            throw ChildCheckFailed{std::string("names rank 1 but not its death: ") + e.what()};
          }
          CHILD_CHECK(seconds_since(t0) < 15.0);  // 60 s is the timeout
          return;
        }
        CHILD_CHECK(false);  // no group can form without rank 1
      },
      40s);
  INFO(describe(results));
  CHECK(results[0].ok());
  CHECK(results[1].signal == SIGKILL);
  CHECK(results[2].ok());
  CHECK(results[3].ok());
}

// Two processes started with RANK=1 (world size 2): the second claimant fails at once with a
// message naming the duplicate rank (InvalidArgument, not a timeout: the group timeout is
// longer than this test's bound); nobody computes a wrong sum.
TEST_CASE("a duplicate RANK is named at once", "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      3,
      [port](int who) {
        const int rank = who == 0 ? 0 : 1;
        auto base = child_store(port);
        try {
          auto pg = make_tcp_group(make_prefix_store("job", base), rank, 2, loopback_options(120s));
          CHILD_CHECK(allreduce_one(*pg, rank == 0 ? 1.0f : 10.0f) == 11.0f);
          // A group that formed stays alive until the other claimant of rank 1 has met it (once the
          // group is gone, a latecomer cannot tell a clash from a rank 0 that has not started yet).
          base->get("clash-seen", 50s);
        } catch (const InvalidArgument&) {
          base->set("clash-seen", std::string_view("1"));
          throw;
        }
      },
      60s);
  INFO(describe(results));
  int clashes = 0;
  for (const auto& r : results) {
    const bool clash = failed_with(r, ErrorCode::invalid_argument, "two processes claim rank 1");
    CHECK((r.ok() || clash));
    clashes += clash ? 1 : 0;
  }
  CHECK(clashes >= 1);
}

// Rank 0 thinks the world has 2 ranks, ranks 1 and 2 think 3: the ranks that meet rank 0's
// formation fail at once (InvalidArgument, not a timeout) naming the clash; one that arrives
// after rank 0 has exited finds the clash recorded and names it when its wait ends.
TEST_CASE("a different WORLD_SIZE on one rank is named at once", "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      3,
      [port](int rank) {
        auto store = make_prefix_store("job", child_store(port));
        make_tcp_group(store, rank, rank == 0 ? 2 : 3, loopback_options(10s));
      },
      60s);
  INFO(describe(results));
  const std::string clash = "WORLD_SIZE differs between ranks: rank 0";
  CHECK(failed_with(results[0], ErrorCode::invalid_argument, clash));
  int at_once = 0;
  for (int r = 1; r < 3; ++r) {
    const bool now =
        failed_with(results[static_cast<std::size_t>(r)], ErrorCode::invalid_argument, clash);
    CHECK((now || failed_with(results[static_cast<std::size_t>(r)], ErrorCode::timeout, clash)));
    at_once += now ? 1 : 0;
  }
  CHECK(at_once >= 1);
}

// Two jobs of two ranks started with one store and one run id (the same namespace), as in
// issue 36: job A forms; job B's rank 1 meets A's formation and fails on the clash; A destroys
// its group; only then does B's rank 0 start, into an empty namespace. B's rank 0 must not
// wait its whole timeout (60 s) for a rank 1 that already failed: it names the clash within
// a few seconds.
TEST_CASE("a rank 0 whose rank 1 failed on another job's formation names the clash at once",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  static constexpr auto kGroupTimeout = 60s;
  static constexpr auto kEachBound = 20s;  // every rank's own hard limit, well under the timeout
  auto results = run_processes(
      4,
      [port](int who) {
        auto base = child_store(port, 60s);
        auto ns = make_prefix_store("job", base);
        if (who == 0 || who == 1) {  // job A, ranks 0 and 1
          {
            auto pg = make_tcp_group(ns, who, 2, loopback_options(kGroupTimeout));
            CHILD_CHECK(allreduce_one(*pg, 1.0f) == 2.0f);
            base->set(fmt::format("a-formed/{}", who), std::string_view("1"));
            base->get("b1-failed", 50s);
          }
          base->set(fmt::format("a-left/{}", who), std::string_view("1"));
          return;
        }
        if (who == 2) {  // job B's rank 1: meets A's formation
          base->wait({"a-formed/0", "a-formed/1"}, 50s);
          const auto start = Clock::now();
          try {
            make_tcp_group(ns, 1, 2, loopback_options(kGroupTimeout));
            base->set("b1-failed", std::string_view("0"));
            throw ChildCheckFailed{"job B's rank 1 joined job A's formed group"};
          } catch (const InvalidArgument& e) {
            base->set("b1-failed", std::string_view("1"));
            CHILD_CHECK(Clock::now() - start < kEachBound);
            CHILD_CHECK(contains(e.what(), "claim rank 1"));
          }
          return;
        }
        // Job B's rank 0: starts once A is gone, into an empty namespace.
        base->wait({"a-left/0", "a-left/1"}, 50s);
        const auto start = Clock::now();
        try {
          make_tcp_group(ns, 0, 2, loopback_options(kGroupTimeout));
          throw ChildCheckFailed{"job B's rank 0 formed a group without its rank 1"};
        } catch (const InvalidArgument& e) {
          CHILD_CHECK(Clock::now() - start < kEachBound);
          CHILD_CHECK(contains(e.what(), "clash recorded"));
          CHILD_CHECK(contains(e.what(), "claim rank 1"));
        }
      },
      45s);
  REQUIRE_ALL_OK(results);
}

// The same two jobs started at once: however their ranks meet, each rank either completes
// (a group of one job's and the other's rank still sums right) or fails within its own bound
// with an InvalidArgument that names the clash: none waits for its timeout.
TEST_CASE("two jobs with one run id started at once fail fast, naming the clash",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      4,
      [port](int who) {
        const int rank = who % 2;
        auto pg = make_tcp_group(make_prefix_store("job", child_store(port, 60s)), rank, 2,
                                 loopback_options(60s));
        CHILD_CHECK(allreduce_one(*pg, rank == 0 ? 1.0f : 10.0f) == 11.0f);
      },
      45s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK((r.ok() || failed_with(r, ErrorCode::invalid_argument, "distinct CHORUS_RUN_IDs")));
    CHECK(r.elapsed < 20s);
  }
}

// The same job (same store namespace) launched again after a failed launch, then after a launch
// that formed and died without cleaning up: the stale records never stop the new launch.
TEST_CASE("a relaunch over an earlier launch's records forms the group", "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  // Launch 1 fails: rank 1 never comes, rank 0 times out after publishing.
  auto first = run_processes(
      1,
      [port](int) {
        auto store = make_prefix_store("job", child_store(port));
        make_tcp_group(store, 0, 2, loopback_options(1s));
      },
      60s);
  REQUIRE(failed_with(first[0], ErrorCode::timeout, "never showed up"));
  // Launch 2 forms and dies without destroying its group (keys left behind).
  auto second = run_processes(
      2,
      [port](int rank) {
        auto pg = make_tcp_group(make_prefix_store("job", child_store(port)), rank, 2,
                                 loopback_options(30s));
        CHILD_CHECK(allreduce_one(*pg, 1.0f) == 2.0f);
        pg->barrier()->wait();
        ::_exit(0);
      },
      60s);
  REQUIRE_ALL_OK(second);
  // Launch 3, rank 1 first: it finds launch 2's formation, sees its rank 0 is gone, and
  // waits for the new one.
  auto third = run_processes(
      2,
      [port](int rank) {
        auto base = child_store(port);
        if (rank == 0) {
          base->get("rank1-started", 30s);
        } else {
          base->set("rank1-started", std::string_view("1"));
        }
        auto pg = make_tcp_group(make_prefix_store("job", base), rank, 2, loopback_options(30s));
        CHILD_CHECK(allreduce_one(*pg, 1.0f) == 2.0f);
      },
      60s);
  REQUIRE_ALL_OK(third);
}

// A process that makes its group again in the same namespace (a new store object over the same
// server, as torch's init_process_group after destroy_process_group with the same store does)
// while the other rank is still leaving the old group: the last member out removes `current`
// when it names the old group, and rank 0's new record can land between that rank's read and
// its removal. No barrier between rounds: the ranks race through 60 of them.
TEST_CASE("groups made again in one namespace while the last member leaves the old one",
          "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      2,
      [port](int rank) {
        auto tcp = std::make_shared<TcpStore>(
            TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 30s});
        for (int i = 0; i < 60; ++i) {
          // A new object each round: the namespace is "tcp/g1" every time.
          auto pg = make_tcp_group(make_prefix_store("job", tcp), rank, 2, loopback_options(30s));
          CHILD_CHECK(allreduce_one(*pg, 1.0f) == 2.0f);
        }
      },
      120s);
  REQUIRE_ALL_OK(results);
}

// 200 groups created and destroyed on one store leave none of their keys behind.
TEST_CASE("destroyed groups remove their store keys", "[tcp][mp][membership]") {
  StoreServerProcess server;
  const auto port = server.port();
  auto results = run_processes(
      2,
      [port](int rank) {
        auto tcp = std::make_shared<TcpStore>(
            TcpStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 30s});
        auto ns = make_prefix_store("job", tcp);
        std::int64_t keys_after_first = 0;
        for (int i = 0; i < 200; ++i) {
          {
            auto pg = make_tcp_group(ns, rank, 2, loopback_options(30s));
            CHILD_CHECK(allreduce_one(*pg, 1.0f) == 2.0f);
          }
          if (i == 0) {
            keys_after_first = tcp->num_keys();
          }
        }
        tcp->set(fmt::format("finished/{}", rank), std::string_view("1"));
        tcp->wait({"finished/0", "finished/1"}, 30s);
        for (const std::string& key : tcp->list_keys()) {
          if (key.rfind("job/", 0) == 0) {
            throw ChildCheckFailed{"key " + key + " outlived its group"};
          }
        }
        CHILD_CHECK(tcp->num_keys() <= keys_after_first + 2);  // + the two "finished" keys
      },
      120s);
  REQUIRE_ALL_OK(results);
}

}  // namespace chorus::test
