// SPDX-License-Identifier: BSD-3-Clause
// The algorithm registry's choice: which algorithm for which op, size and topology under given
// α/β figures; CHORUS_ALGO forcing, its fall-backs and its errors; the link cost figures'
// text form and their agreement through the store.
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/bootstrap/link_costs.hpp"

namespace chorus::test {
namespace {

using cpu::AlgorithmId;

// Links with equal figures everywhere: a round 10 us, 1 GB/s, reductions 4 GB/s; more CPUs
// than ranks.
cpu::LinkCosts uniform_costs() {
  cpu::LinkCosts c;
  c.shm = c.socket = c.network = {10.0, 1.0};
  c.peer_copy_gbps = 0.5;
  c.memcpy_gbps = 4.0;
  c.reduce_gbps = 4.0;
  c.host_cpus = 64;
  return c;
}

struct Chooser {
  cpu::LinkCosts costs = uniform_costs();
  cpu::CollectiveArgs a;
  Chooser() {
    a.small_bytes = std::size_t{1} << 40;  // the cost model alone decides
    a.costs = &costs;
  }
  AlgorithmId operator()(OpType kind, int n, std::size_t bytes) {
    a.kind = kind;
    a.dtype = DataType::uint8;
    a.count = bytes;
    return cpu::select_algorithm(n, a);
  }
};

// The smallest power-of-two size from 1 KiB at which `kind` on n ranks stops choosing `id`.
std::size_t crossover(Chooser& choose, OpType kind, int n, AlgorithmId id) {
  std::size_t bytes = 1024;
  while (bytes < (std::size_t{1} << 34) && choose(kind, n, bytes) == id) {
    bytes *= 2;
  }
  return bytes;
}

TEST_CASE("allreduce: latency algorithms small, bandwidth algorithms large", "[tcp][selection]") {
  Chooser choose;
  for (int n : {2, 3, 4, 5, 8}) {
    INFO("n " << n);
    CHECK(choose(OpType::allreduce, n, 8) == AlgorithmId::recursive_doubling);
  }
  // Large: halving-doubling at powers of two (the ring's bytes in fewer rounds), the ring
  // elsewhere (folding pairs costs two more whole-buffer transfers); at 2 ranks they tie and
  // the registry's order picks the ring.
  const std::size_t large = std::size_t{64} << 20;
  CHECK(choose(OpType::allreduce, 2, large) == AlgorithmId::ring);
  CHECK(choose(OpType::allreduce, 3, large) == AlgorithmId::ring);
  CHECK(choose(OpType::allreduce, 4, large) == AlgorithmId::halving_doubling);
  CHECK(choose(OpType::allreduce, 6, large) == AlgorithmId::ring);
  CHECK(choose(OpType::allreduce, 8, large) == AlgorithmId::halving_doubling);
  // The same choice for every dtype of the same bytes.
  choose.a.dtype = DataType::float64;
  choose.a.kind = OpType::allreduce;
  choose.a.count = large / 8;
  CHECK(cpu::select_algorithm(4, choose.a) == AlgorithmId::halving_doubling);
}

TEST_CASE("the latency/bandwidth crossover follows α/β", "[tcp][selection]") {
  Chooser choose;
  const std::size_t base = crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(base > 1024);
  CHECK(base < (std::size_t{64} << 20));
  // Dearer rounds: latency algorithms win to larger sizes; cheaper ones: to smaller sizes.
  choose.costs.socket.alpha_us *= 8;
  const std::size_t dear = crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(dear > base);
  choose.costs.socket.alpha_us /= 64;
  const std::size_t cheap =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(cheap < base);
  // The same for broadcast's tree against the chain.
  Chooser b;
  const std::size_t tree = crossover(b, OpType::broadcast, 8, AlgorithmId::tree);
  CHECK(tree > 1024);
  CHECK(b(OpType::broadcast, 8, std::size_t{64} << 20) == AlgorithmId::chain);
  b.costs.socket.alpha_us *= 8;
  CHECK(crossover(b, OpType::broadcast, 8, AlgorithmId::tree) > tree);
}

TEST_CASE("the transport the group's ranks use picks the figures", "[tcp][selection]") {
  Chooser choose;
  choose.costs.shm = {1.0, 4.0};      // cheap rounds through shared memory
  choose.costs.socket = {50.0, 1.0};  // dear ones over loopback tcp
  const std::size_t over_sockets =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  choose.a.shared_memory = true;
  const std::size_t over_shm =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(over_shm < over_sockets);
  // Several hosts: the flat algorithms cross the network.
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d"});
  choose.a.shared_memory = false;
  choose.a.hosts = &apart;
  choose.costs.network = {500.0, 0.1};
  CHECK(crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling) > over_sockets);
}

TEST_CASE("a host's ranks beyond its CPUs make its rounds dearer", "[tcp][selection]") {
  Chooser choose;
  choose.a.shared_memory = true;
  const std::size_t enough =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  choose.costs.host_cpus = 2;  // 8 ranks on 2 CPUs: a round costs 4 alphas
  const std::size_t crowded =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  CHECK(crowded > enough);
  choose.a.shared_memory = false;
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d", "e", "f", "g", "h"});
  choose.a.hosts = &apart;  // one rank per host: the network's rounds, never scaled
  const std::size_t network =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  choose.costs.host_cpus = 64;
  CHECK(crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling) == network);
}

TEST_CASE("hierarchical allreduce over hosts with several ranks", "[tcp][selection]") {
  Chooser choose;
  choose.costs.shm = {5.0, 5.0};
  choose.costs.network = {50.0, 0.125};  // 1 Gbit/s between hosts
  const cpu::HostMap two_by_two = cpu::make_host_map({"a", "a", "b", "b"});
  choose.a.hosts = &two_by_two;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10, std::size_t{64} << 20}) {
    INFO("bytes " << bytes);
    CHECK(choose(OpType::allreduce, 4, bytes) == AlgorithmId::hierarchical);
  }
  // Not for avg (every phase would divide); not where no host has two ranks.
  choose.a.op = ReduceOp::avg;
  CHECK(choose(OpType::allreduce, 4, 8) != AlgorithmId::hierarchical);
  choose.a.forced = AlgorithmId::hierarchical;
  CHECK(choose(OpType::allreduce, 4, 8) != AlgorithmId::hierarchical);
  choose.a.op = ReduceOp::sum;
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d"});
  choose.a.hosts = &apart;
  CHECK(choose(OpType::allreduce, 4, 8) == AlgorithmId::recursive_doubling);
}

TEST_CASE("direct: the default between SharedBuffers from 256 KiB, never with private ones",
          "[tcp][selection]") {
  Chooser choose;
  choose.a.peer_memory = true;
  choose.a.shared_memory = true;
  choose.a.shared_buffers = true;
  for (OpType kind :
       {OpType::allreduce, OpType::reduce_scatter, OpType::allgather, OpType::broadcast}) {
    INFO(to_string(kind));
    for (int n : {2, 4}) {
      CHECK(choose(kind, n, cpu::kSharedBufferMinBytes) == AlgorithmId::direct);
    }
    // Below 256 KiB it is never the default, however cheap the model says it is.
    CHECK(choose(kind, 4, cpu::kSharedBufferMinBytes - 1) != AlgorithmId::direct);
  }
  // Private buffers: never the default (what the probe's figure misses: results.md), however
  // fast the probe says process_vm_readv is.
  choose.a.shared_buffers = false;
  choose.costs.peer_copy_gbps = 1000;
  for (OpType kind : {OpType::allreduce, OpType::allgather, OpType::broadcast}) {
    CHECK(choose(kind, 3, std::size_t{64} << 20) != AlgorithmId::direct);
  }
  CHECK(choose(OpType::allreduce, 3, std::size_t{64} << 20) == AlgorithmId::ring);
  // Without peer memory it never runs, forced or not.
  choose.a.peer_memory = false;
  CHECK(choose(OpType::allreduce, 3, std::size_t{64} << 20) == AlgorithmId::ring);
  choose.a.forced = AlgorithmId::direct;
  CHECK(choose(OpType::allreduce, 3, 8) == AlgorithmId::recursive_doubling);
}

TEST_CASE("small_allreduce_bytes bounds the latency algorithms", "[tcp][selection]") {
  Chooser choose;
  choose.a.small_bytes = 0;
  CHECK(choose(OpType::allreduce, 4, 8) == AlgorithmId::halving_doubling);
  CHECK(choose(OpType::allreduce, 3, 8) == AlgorithmId::ring);
  CHECK(choose(OpType::broadcast, 4, 8) == AlgorithmId::chain);
  CHECK(choose(OpType::reduce, 4, 8) == AlgorithmId::chain);
  choose.a.small_bytes = 64;
  CHECK(choose(OpType::allreduce, 4, 64) == AlgorithmId::recursive_doubling);
  CHECK(choose(OpType::allreduce, 4, 65) == AlgorithmId::halving_doubling);
}

TEST_CASE("ops with one algorithm, and world size 1", "[tcp][selection]") {
  Chooser choose;
  CHECK(choose(OpType::gather, 4, 1 << 20) == AlgorithmId::direct);
  CHECK(choose(OpType::scatter, 4, 1 << 20) == AlgorithmId::direct);
  CHECK(choose(OpType::all_to_all, 4, 1 << 20) == AlgorithmId::pairwise);
  CHECK(choose(OpType::barrier, 4, 0) == AlgorithmId::dissemination);
  CHECK(choose(OpType::allreduce, 1, 1 << 20) == AlgorithmId::local);
  CHECK(std::string(cpu::algorithm_name(AlgorithmId::local)) == "local");
}

TEST_CASE("no figures given: the defaults choose", "[tcp][selection]") {
  cpu::CollectiveArgs a;
  a.kind = OpType::allreduce;
  a.count = 8;
  CHECK(cpu::select_algorithm(4, a) == AlgorithmId::recursive_doubling);
}

TEST_CASE("CHORUS_ALGO: parsed once into ids, forced where it runs, bad entries named",
          "[tcp][selection]") {
  const auto forced = cpu::parse_algorithm_overrides("allreduce=ring,broadcast=tree");
  CHECK(forced[static_cast<std::size_t>(OpType::allreduce)] == AlgorithmId::ring);
  CHECK(forced[static_cast<std::size_t>(OpType::broadcast)] == AlgorithmId::tree);
  CHECK(forced[static_cast<std::size_t>(OpType::reduce)] == AlgorithmId::automatic);
  Chooser choose;
  choose.a.forced = AlgorithmId::ring;
  CHECK(choose(OpType::allreduce, 4, 8) == AlgorithmId::ring);  // the default: rd
  choose.a.forced = AlgorithmId::tree;
  CHECK(choose(OpType::broadcast, 4, std::size_t{1} << 30) == AlgorithmId::tree);
  choose.a.forced = AlgorithmId::halving_doubling;
  CHECK(choose(OpType::allreduce, 3, 8) == AlgorithmId::halving_doubling);  // folds pairs
  // hierarchical on one host: the default.
  choose.a.forced = AlgorithmId::hierarchical;
  CHECK(choose(OpType::allreduce, 4, 8) == AlgorithmId::recursive_doubling);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"allreduce=tree",
            "CHORUS_ALGO='allreduce=tree': allreduce has no algorithm 'tree'; it has ring, "
            "recursive_doubling, halving_doubling, hierarchical, direct"},
           {"allreduce", "CHORUS_ALGO='allreduce': allreduce has no algorithm ''"},
           {"reduction=ring", "CHORUS_ALGO='reduction=ring': 'reduction=ring' names no collective"},
           {"allreduce=ring,", "CHORUS_ALGO='allreduce=ring,': '' names no collective"},
           {"broadcast=ring", "broadcast has no algorithm 'ring'; it has tree, chain, direct"}}) {
    INFO(text);
    try {
      (void)cpu::parse_algorithm_overrides(text);
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  }
}

TEST_CASE("link costs: text form, and one set for the whole group", "[tcp][selection]") {
  const cpu::LinkCosts d = cpu::default_link_costs();
  const auto back = cpu::parse_link_costs(cpu::format_link_costs(d));
  REQUIRE(back);
  CHECK(cpu::format_link_costs(*back) == cpu::format_link_costs(d));
  for (const char* bad :
       {"", "v1", "v2 shm=1/1 socket=1/1 network=1/1 peer_copy=1 memcpy=1 reduce=1",
        "v1 shm=1/0 socket=1/1 network=1/1 peer_copy=1 memcpy=1 reduce=1",
        "v1 shm=1/1 socket=1/1 network=1/1 peer_copy=1 memcpy=1 reduce=1 x"}) {
    INFO(bad);
    CHECK_FALSE(cpu::parse_link_costs(bad));
  }
  // Rank 0 publishes; the others read exactly its figures. CHORUS_LINK_COSTS=default: no probe.
  ::setenv("CHORUS_LINK_COSTS", "default", 1);
  auto store = make_hash_store();
  std::vector<std::string> seen(4);
  std::vector<std::thread> ranks;
  for (int r = 3; r >= 0; --r) {  // the readers first: they wait for rank 0
    ranks.emplace_back([&, r] {
      seen[static_cast<std::size_t>(r)] = cpu::format_link_costs(
          cpu::agree_on_link_costs(*store, "epoch1", r, Deadline::after(std::chrono::seconds(10))));
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  ::unsetenv("CHORUS_LINK_COSTS");
  for (const std::string& s : seen) {
    CHECK(s == cpu::format_link_costs(d));
  }
}

TEST_CASE("the probe measures every figure within bounds", "[tcp][selection]") {
  const auto t0 = std::chrono::steady_clock::now();
  const cpu::LinkCosts m = cpu::measure_link_costs();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(cpu::format_link_costs(m) << " in " << ms << " ms");
  CHECK(ms < 2000);  // about 0.1 s on the loaded 2-core VM
  for (double v : {m.shm.gbps, m.socket.gbps, m.memcpy_gbps, m.reduce_gbps, m.peer_copy_gbps}) {
    CHECK(v > 0.01);
  }
  CHECK(m.shm.alpha_us > 0);
  CHECK(m.socket.alpha_us > 0);
  CHECK(cpu::parse_link_costs(cpu::format_link_costs(m)));
}

}  // namespace
}  // namespace chorus::test
