// SPDX-License-Identifier: BSD-3-Clause
// The algorithm registry's choice: which algorithm for which op, size and topology under given
// α/β figures; CHORUS_ALGO forcing, its fall-backs and its errors; each transport layer
// pricing the peer classes it serves; the price list's text form and its agreement through the
// store.
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <chorus/errors.hpp>
#include <chorus/store.hpp>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/bootstrap/link_costs.hpp"
#include "cpu/transports/socket/network_probe.hpp"
#include "cpu/transports/transport_stack.hpp"

namespace chorus::test {
namespace {

using cpu::AlgorithmId;

// Links with equal figures everywhere: a round 10 us, 1 GB/s, reductions 4 GB/s; more CPUs
// than ranks.
cpu::LinkCosts uniform_costs() {
  cpu::LinkCosts c;
  c.same_host = c.other_host = {10.0, 1.0};
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
  choose.costs.same_host.alpha_us *= 8;
  const std::size_t dear = crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(dear > base);
  choose.costs.same_host.alpha_us /= 64;
  const std::size_t cheap =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(cheap < base);
  // The same for broadcast's tree against the chain.
  Chooser b;
  const std::size_t tree = crossover(b, OpType::broadcast, 8, AlgorithmId::tree);
  CHECK(tree > 1024);
  CHECK(b(OpType::broadcast, 8, std::size_t{64} << 20) == AlgorithmId::chain);
  b.costs.same_host.alpha_us *= 8;
  CHECK(crossover(b, OpType::broadcast, 8, AlgorithmId::tree) > tree);
}

TEST_CASE("the peer class a flat algorithm crosses picks the figures", "[tcp][selection]") {
  Chooser choose;
  choose.costs.same_host = {1.0, 4.0};  // cheap rounds on the host
  const std::size_t on_host =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  choose.costs.same_host = {50.0, 1.0};  // dear ones
  const std::size_t dear_host =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(on_host < dear_host);
  // Several hosts: the flat algorithms cross the network, whatever the host's links cost.
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d"});
  choose.a.hosts = &apart;
  choose.costs.other_host = {500.0, 0.1};
  const std::size_t slow_network =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  CHECK(slow_network > dear_host);
  choose.costs.same_host = {1.0, 4.0};
  CHECK(crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling) == slow_network);
}

namespace {

// A price list with every production probe's entry set apart, so a test sees who priced what.
cpu::PriceList distinct_prices() {
  cpu::PriceList p;
  p.links["socket"] = {11.0, 1.1};
  p.links["shm"] = {2.0, 20.0};
  p.links["peer_copy"] = {0.0, 7.0};
  p.links["network"] = {99.0, 0.125};
  p.memcpy_gbps = 30.0;
  p.reduce_gbps = 25.0;
  p.host_cpus = 8;
  return p;
}

// The production table's figures for a rank of a group; `host_ranks` ranks on its host.
cpu::LinkCosts priced(const cpu::PriceList& prices, bool whole_group, bool shared_memory) {
  cpu::StackContext ctx;
  ctx.whole_group = whole_group;
  ctx.shared_memory = shared_memory;
  ctx.prices = &prices;
  return cpu::price_stack(cpu::transport_layers(), ctx);
}

bool same(const cpu::LinkCost& a, const cpu::LinkCost& b) {
  return a.alpha_us == b.alpha_us && a.gbps == b.gbps;
}

}  // namespace

TEST_CASE("each transport layer prices the peers it serves; the layers above override",
          "[tcp][selection]") {
  const cpu::PriceList p = distinct_prices();
  // One host, its streams through shared memory: shm prices the host's peers, cma the copies.
  cpu::LinkCosts c = priced(p, true, true);
  CHECK(same(c.same_host, p.links.at("shm")));
  CHECK(same(c.other_host, p.links.at("network")));
  CHECK(c.peer_copy_gbps == 7.0);
  CHECK(c.memcpy_gbps == 30.0);
  CHECK(c.reduce_gbps == 25.0);
  CHECK(c.host_cpus == 8);
  // One host whose ranks could not share memory: the sockets carry, and price, everything.
  c = priced(p, true, false);
  CHECK(same(c.same_host, p.links.at("socket")));
  // Several hosts: every rank prices a host's peers through the rings, even a rank alone on
  // its host (its stack has no shm layer), so that every rank holds the same figures.
  c = priced(p, false, false);
  CHECK(same(c.same_host, p.links.at("shm")));
  CHECK(same(c.other_host, p.links.at("network")));
  // CHORUS_TRANSPORT=tcp: the sockets on the host too.
  ::setenv("CHORUS_TRANSPORT", "tcp", 1);
  c = priced(p, false, false);
  ::unsetenv("CHORUS_TRANSPORT");
  CHECK(same(c.same_host, p.links.at("socket")));
  // A list from before a transport existed: that transport's fallback.
  cpu::PriceList old = p;
  old.links.erase("network");
  c = priced(old, false, false);
  CHECK(c.other_host.gbps == 1.25);
  // Every production layer with a probe names it in the host's list.
  std::vector<std::string> names;
  for (const cpu::LinkProbe& probe : cpu::host_probes(cpu::transport_layers())) {
    names.push_back(probe.name);
  }
  CHECK(names == std::vector<std::string>{"socket", "shm", "peer_copy"});
}

TEST_CASE("a layer's own probe and price need no line outside its entry", "[tcp][selection]") {
  // A test transport over the production table, priced like any other: it declares its probe
  // and takes over the network from the socket layer.
  std::vector<cpu::TransportLayer> table = cpu::transport_layers();
  cpu::TransportLayer fast;
  fast.name = "fast";
  fast.applies = [](const cpu::StackContext&) { return false; };
  fast.probes = {{"fast", {1.0, 50.0}, [] { return cpu::LinkCost{2.0, 40.0}; }}};
  fast.price = [](const cpu::StackContext&, const cpu::PriceList& prices, cpu::LinkCosts& costs) {
    costs.other_host = prices.link("fast", {1.0, 50.0});
  };
  table.insert(table.end() - 1, fast);  // under fault
  const cpu::PriceList measured = cpu::measure_host_prices(cpu::host_probes({fast}));
  CHECK(same(measured.links.at("fast"), {2.0, 40.0}));
  cpu::StackContext ctx;
  ctx.prices = &measured;
  CHECK(same(cpu::price_stack(table, ctx).other_host, {2.0, 40.0}));
  // Its figures move the choice between hosts.
  Chooser choose;
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d"});
  choose.a.hosts = &apart;
  choose.costs = cpu::price_stack(table, ctx);
  choose.costs.host_cpus = 64;
  const std::size_t fast_crossover =
      crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling);
  choose.costs.other_host = {2.0, 0.125};
  CHECK(crossover(choose, OpType::allreduce, 4, AlgorithmId::recursive_doubling) < fast_crossover);
}

TEST_CASE("a host's ranks beyond its CPUs make its rounds dearer", "[tcp][selection]") {
  Chooser choose;
  const std::size_t enough =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  choose.costs.host_cpus = 2;  // 8 ranks on 2 CPUs: a round costs 4 alphas
  const std::size_t crowded =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  CHECK(crowded > enough);
  const cpu::HostMap apart = cpu::make_host_map({"a", "b", "c", "d", "e", "f", "g", "h"});
  choose.a.hosts = &apart;  // one rank per host: the network's rounds, never scaled
  const std::size_t network =
      crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling);
  choose.costs.host_cpus = 64;
  CHECK(crossover(choose, OpType::allreduce, 8, AlgorithmId::recursive_doubling) == network);
}

TEST_CASE("hierarchical allreduce over hosts with several ranks", "[tcp][selection]") {
  Chooser choose;
  choose.costs.same_host = {5.0, 5.0};
  choose.costs.other_host = {50.0, 0.125};  // 1 Gbit/s between hosts
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

TEST_CASE("price lists: text form, and one list for the whole group", "[tcp][selection]") {
  const cpu::PriceList d = distinct_prices();
  const auto back = cpu::parse_prices(cpu::format_prices(d));
  REQUIRE(back);
  CHECK(cpu::format_prices(*back) == cpu::format_prices(d));
  CHECK(back->links.size() == 4);
  for (const char* bad :
       {"", "v1", "v2", "v2 memcpy=1 reduce=1", "v2 memcpy=1 reduce=0 cpus=1",
        "v2 memcpy=1 reduce=1 cpus=1 shm=1/0", "v2 memcpy=1 reduce=1 cpus=1 shm=1/1 shm=1/1",
        "v2 memcpy=1 reduce=1 cpus=1 shm=1/1x", "v2 memcpy=1 reduce=1 cpus=1 x",
        "v2 memcpy=1 reduce=1 cpus=1 Shm=1/1",
        "v1 shm=1/1 socket=1/1 network=1/1 peer_copy=1 memcpy=1 reduce=1 "
        "cpus=2"}) {
    INFO(bad);
    CHECK_FALSE(cpu::parse_prices(bad));
  }
  CHECK(cpu::parse_link_cost("25.000/1.250"));
  CHECK_FALSE(cpu::parse_link_cost("25/0"));
  CHECK_FALSE(cpu::parse_link_cost("25/1 2/3"));
  // Rank 0 publishes; the others read exactly its figures. CHORUS_LINK_COSTS=default: no probe.
  ::setenv("CHORUS_LINK_COSTS", "default", 1);
  const std::vector<cpu::LinkProbe> probes = cpu::host_probes(cpu::transport_layers());
  auto store = make_hash_store();
  std::vector<std::string> seen(4);
  std::vector<std::thread> ranks;
  for (int r = 3; r >= 0; --r) {  // the readers first: they wait for rank 0
    ranks.emplace_back([&, r] {
      seen[static_cast<std::size_t>(r)] = cpu::format_prices(cpu::agree_on_prices(
          *store, "epoch1", r, Deadline::after(std::chrono::seconds(10)), probes));
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  ::unsetenv("CHORUS_LINK_COSTS");
  for (const std::string& s : seen) {
    CHECK(s == seen[0]);
  }
  const auto agreed = cpu::parse_prices(seen[0]);
  REQUIRE(agreed);
  CHECK(same(agreed->links.at("shm"), {3.3, 22.7}));  // the fallbacks
}

TEST_CASE("the probes measure every figure within bounds", "[tcp][selection]") {
  const auto t0 = std::chrono::steady_clock::now();
  const cpu::PriceList m = cpu::measure_host_prices(cpu::host_probes(cpu::transport_layers()));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(cpu::format_prices(m) << " in " << ms << " ms");
  CHECK(ms < 2000);  // about 0.1 s on the loaded 2-core VM
  for (double v : {m.links.at("shm").gbps, m.links.at("socket").gbps, m.memcpy_gbps, m.reduce_gbps,
                   m.links.at("peer_copy").gbps}) {
    CHECK(v > 0.01);
  }
  CHECK(m.links.at("shm").alpha_us > 0);
  CHECK(m.links.at("socket").alpha_us > 0);
  CHECK(cpu::parse_prices(cpu::format_prices(m)));
}

TEST_CASE("the network: every rank holds the slowest link the probers measured",
          "[tcp][selection]") {
  CHECK_FALSE(cpu::slowest_link({}));
  CHECK_FALSE(cpu::slowest_link({std::nullopt}));
  const auto slowest =
      cpu::slowest_link({cpu::LinkCost{30.0, 1.0}, std::nullopt, cpu::LinkCost{50.0, 2.0}});
  REQUIRE(slowest);
  CHECK(same(*slowest, {50.0, 1.0}));
  // Four ranks on four hosts, each probing its next neighbour and measuring something else
  // (rank 2 had no figure): all of them hold rank 0's list, with the slowest link.
  ::setenv("CHORUS_LINK_COSTS", "default", 1);
  const std::vector<cpu::LinkProbe> probes = cpu::host_probes(cpu::transport_layers());
  const std::vector<std::optional<cpu::LinkCost>> local = {cpu::LinkCost{40.0, 0.5},
                                                           cpu::LinkCost{45.5, 0.125}, std::nullopt,
                                                           cpu::LinkCost{60.25, 1.1}};
  auto store = make_hash_store();
  std::vector<std::string> seen(4);
  std::vector<cpu::LinkCosts> costs(4);
  std::vector<std::thread> ranks;
  for (int r : {3, 1, 0, 2}) {  // rank 0 before one prober: it waits for every sample
    ranks.emplace_back([&, r] {
      cpu::NetworkSamples net;
      net.probers = {0, 1, 2, 3};
      net.mine = local[static_cast<std::size_t>(r)];
      const cpu::PriceList p = cpu::agree_on_prices(
          *store, "epoch2", r, Deadline::after(std::chrono::seconds(10)), probes, net);
      seen[static_cast<std::size_t>(r)] = cpu::format_prices(p);
      costs[static_cast<std::size_t>(r)] = priced(p, false, false);
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  ::unsetenv("CHORUS_LINK_COSTS");
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(seen[static_cast<std::size_t>(r)] == seen[0]);
    CHECK(same(costs[static_cast<std::size_t>(r)].other_host, {60.25, 0.125}));
  }
  // The samples were removed once read: only the list is left.
  CHECK(store->num_keys() == 1);
}

TEST_CASE("the network probers: ring neighbours on other hosts, one per link", "[tcp][selection]") {
  CHECK(cpu::network_probers(1, {0}).empty());
  CHECK(cpu::network_probers(4, {0, 0, 0, 0}).empty());
  // Two ranks share one link: only the lower one probes it.
  CHECK(cpu::network_probers(2, {0, 1}) == std::vector<int>{0});
  // 0 and 2 on one host, 1 and 3 on the other: every ring step crosses.
  CHECK(cpu::network_probers(4, {0, 1, 0, 1}) == std::vector<int>{0, 1, 2, 3});
  // Two hosts of two: the ring crosses twice.
  CHECK(cpu::network_probers(4, {0, 0, 1, 1}) == std::vector<int>{1, 3});
}

}  // namespace
}  // namespace chorus::test
