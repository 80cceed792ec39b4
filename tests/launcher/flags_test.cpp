// SPDX-License-Identifier: BSD-3-Clause
// Command lines: chorusrun's torchrun-compatible flags and the benchmarks' nccl-tests flags
// (both parsers are compiled into this test from tools/ and bench/), busbw factors, and the
// exactness of the benchmarks' value patterns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../bench/common.hpp"
#include "../../tools/chorusrun_args.hpp"
#include "../../tools/chorusrun_bind.hpp"

namespace {

template <class Parse>
auto parse_words(Parse parse, std::vector<std::string> words) {
  words.insert(words.begin(), "prog");
  std::vector<const char*> argv;
  for (const auto& w : words) {
    argv.push_back(w.c_str());
  }
  return parse(static_cast<int>(argv.size()), argv.data());
}

chorusrun::RunArgs run_args(std::vector<std::string> words) {
  return parse_words(chorusrun::parse_args, std::move(words));
}

bench::Options bench_options(std::vector<std::string> words) {
  return parse_words(bench::parse_options, std::move(words));
}

}  // namespace

TEST_CASE("chorusrun: torchrun spellings", "[launcher][flags]") {
  auto a = run_args({"--nproc-per-node", "4", "--nnodes=2", "--node_rank", "1", "--master-addr",
                     "10.1.1.1", "--master_port=1234", "--max-restarts", "3", "--", "prog", "-x"});
  CHECK(a.nproc_per_node == 4);
  CHECK(a.nnodes == 2);
  CHECK(a.node_rank == 1);
  CHECK(a.master_addr == "10.1.1.1");
  CHECK(a.master_port == 1234);
  CHECK(a.max_restarts == 3);
  CHECK(a.program == std::vector<std::string>{"prog", "-x"});

  a = run_args({"--nproc_per_node=2", "/bin/true"});
  CHECK(a.nproc_per_node == 2);
  CHECK(a.master_port == 29500);
  CHECK(a.master_addr == "127.0.0.1");

  a = run_args({"-n", "3", "--standalone", "prog", "--nnodes", "7"});  // program's own flags
  CHECK(a.nproc_per_node == 3);
  CHECK(a.standalone);
  CHECK(a.master_port == 0);
  CHECK(a.nnodes == 1);
  CHECK(a.program == std::vector<std::string>{"prog", "--nnodes", "7"});

  a = run_args({"--rdzv-endpoint", "[::1]:5000", "--rdzv-backend", "c10d", "--no-python", "p"});
  CHECK(a.master_addr == "::1");
  CHECK(a.master_port == 5000);

  a = run_args({"--log-dir", "/tmp/x", "--tee", "3", "--redirects=1", "--kill-timeout", "2.5",
                "--nnodes", "1:1", "p"});
  CHECK(a.log_dir == "/tmp/x");
  CHECK(a.tee == 3);
  CHECK(a.redirects == 1);
  CHECK(a.kill_timeout_s == 2.5);

  CHECK(run_args({"p"}).bind == chorusrun::BindTo::none);
  CHECK(run_args({"--bind-to", "core", "p"}).bind == chorusrun::BindTo::core);
  CHECK(run_args({"--bind_to=none", "p"}).bind == chorusrun::BindTo::none);

  CHECK(run_args({"--help"}).help);
  CHECK(run_args({"--help-env"}).help_env);
}

TEST_CASE("chorusrun: bad command lines say what is wrong", "[launcher][flags]") {
  auto error = [](std::vector<std::string> words) -> std::string {
    try {
      (void)run_args(std::move(words));
    } catch (const chorusrun::UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK_THAT(error({"-n", "0", "p"}), Catch::Contains("-n expects an integer in [1"));
  CHECK_THAT(error({"-n", "four", "p"}), Catch::Contains("'four'"));
  CHECK_THAT(error({"-n", "2"}), Catch::Contains("no program"));
  CHECK_THAT(error({"--bogus", "p"}), Catch::Contains("unknown flag --bogus"));
  CHECK_THAT(error({"--node-rank", "2", "--nnodes", "2", "p"}),
             Catch::Contains("not below --nnodes"));
  CHECK_THAT(error({"--standalone", "--nnodes", "2", "p"}),
             Catch::Contains("--standalone runs one node"));
  CHECK_THAT(error({"--nnodes", "1:4", "p"}), Catch::Contains("fixed number of nodes"));
  CHECK_THAT(error({"--tee", "4", "p"}), Catch::Contains("--tee"));
  CHECK_THAT(error({"--master-port", "70000", "p"}), Catch::Contains("--master-port"));
  CHECK_THAT(error({"--max-restarts"}), Catch::Contains("expects a value"));
  CHECK_THAT(error({"--bind-to", "socket", "p"}),
             Catch::Contains("--bind-to expects none or core, got 'socket'"));
}

TEST_CASE("chorusrun: --bind-to core gives each local rank whole cores of its own",
          "[launcher][flags]") {
  using chorusrun::CpuList;
  using chorusrun::split_cores;
  // One CPU per core.
  const std::vector<CpuList> two = {{0}, {1}};
  CHECK(split_cores(two, 2) == std::vector<CpuList>{{0}, {1}});
  CHECK(split_cores(two, 1) == std::vector<CpuList>{{0, 1}});
  // Hardware threads numbered as Linux often does (core k is CPUs k and k+4): a rank gets
  // both threads of each of its cores, and neighbouring cores.
  const std::vector<CpuList> ht = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  CHECK(split_cores(ht, 2) == std::vector<CpuList>{{0, 1, 4, 5}, {2, 3, 6, 7}});
  CHECK(split_cores(ht, 4) == std::vector<CpuList>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // Five cores, two ranks: every core used once, the first rank gets the odd one.
  const std::vector<CpuList> five = {{0}, {1}, {2}, {3}, {8}};
  CHECK(split_cores(five, 2) == std::vector<CpuList>{{0, 1, 2}, {3, 8}});
  // More ranks than cores: an error that names both counts and the CPUs.
  try {
    (void)split_cores(two, 3);
    FAIL("3 ranks on 2 cores were accepted");
  } catch (const chorusrun::UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("3 ranks on this node") &&
                             Catch::Contains("2 cores (CPUs 0-1)") &&
                             Catch::Contains("--bind-to none"));
  }

  CHECK(chorusrun::cpu_list_string({5, 0, 1, 2, 8, 9}) == "0-2,5,8-9");
  CHECK(chorusrun::parse_cpu_list("0-2,5,8-9\n") == CpuList{0, 1, 2, 5, 8, 9});
  CHECK(chorusrun::parse_cpu_list("3") == CpuList{3});
  CHECK_FALSE(chorusrun::parse_cpu_list(""));
  CHECK_FALSE(chorusrun::parse_cpu_list("2-1"));
  CHECK_FALSE(chorusrun::parse_cpu_list("a"));
  CHECK(chorusrun::affinity_mask({0, 3, 64}) == std::vector<unsigned long>{9UL, 1UL});

  // This machine: every allowed CPU is in exactly one core, cores in order of their first CPU.
  const std::vector<CpuList> cores = chorusrun::allowed_cores();
  REQUIRE_FALSE(cores.empty());
  CpuList seen;
  for (const CpuList& core : cores) {
    REQUIRE_FALSE(core.empty());
    seen.insert(seen.end(), core.begin(), core.end());
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  for (std::size_t k = 1; k < cores.size(); ++k) {
    CHECK(cores[k - 1].front() < cores[k].front());
  }
}

TEST_CASE("benchmarks: nccl-tests flags, short and long", "[launcher][flags][bench]") {
  auto o = bench_options({"-b", "8",  "-e", "64M", "-f",  "4",  "-c",   "1",  "-n", "5",  "-w",
                          "2",  "-m", "3",  "-o",  "max", "-d", "half", "-r", "1",  "-z", "1",
                          "-a", "3",  "-T", "30",  "-g",  "1",  "-t",   "1",  "-R", "1"});
  CHECK(o.min_bytes == 8);
  CHECK(o.max_bytes == 64u << 20);
  CHECK(o.step_factor == 4);
  CHECK(o.check == 1);
  CHECK(o.iters == 5);
  CHECK(o.warmup_iters == 2);
  CHECK(o.agg_iters == 3);
  CHECK(o.ops == std::vector<chorus::ReduceOp>{chorus::ReduceOp::max});
  CHECK(o.dtypes == std::vector<chorus::DataType>{chorus::DataType::float16});
  CHECK(o.root == 1);
  CHECK(o.blocking == 1);
  CHECK(o.average == 3);
  CHECK(o.timeout_s == 30);
  CHECK(o.registered == 1);

  o = bench_options(
      {"--minbytes=1K",  "--maxbytes", "2G",          "--stepbytes", "512",       "--iters=7",
       "--warmup_iters", "0",          "--agg-iters", "2",           "--check",   "0",
       "--op",           "all",        "--datatype",  "all",         "--root",    "0",
       "--blocking",     "0",          "--average",   "0",           "--timeout", "5",
       "--backend",      "nccl",       "--json",      "out.json"});
  CHECK(o.min_bytes == 1024);
  CHECK(o.max_bytes == std::size_t{2} << 30);
  CHECK(o.step_bytes == 512);
  CHECK(o.step_factor == 1);
  CHECK(o.iters == 7);
  CHECK(o.warmup_iters == 0);
  CHECK(o.agg_iters == 2);
  CHECK(o.check == 0);
  CHECK(o.ops.size() == 5);
  CHECK(o.dtypes.size() == 10);
  CHECK(o.backend == chorus::Backend::nccl);
  CHECK(o.json_path == "out.json");
  CHECK(o.registered == 0);
  CHECK(bench_options({"--local_register", "1"}).registered == 1);

  o = bench_options({"-n20", "-dbfloat16"});  // getopt-style glued values
  CHECK(o.iters == 20);
  CHECK(o.dtypes == std::vector<chorus::DataType>{chorus::DataType::bfloat16});

  o = bench_options({});  // nccl-tests defaults
  CHECK(o.min_bytes == 32u << 20);
  CHECK(o.max_bytes == 32u << 20);
  CHECK(o.iters == 20);
  CHECK(o.warmup_iters == 1);
  CHECK(o.check == 1);
  CHECK(o.average == 1);
  CHECK(o.backend == chorus::Backend::tcp);
  CHECK(o.corrupt_rank == -1);
  CHECK(bench_options({"--test-corrupt-rank", "1"}).corrupt_rank == 1);
}

TEST_CASE("benchmarks: sizes and bad flags", "[launcher][flags][bench]") {
  CHECK(bench::parse_size("8") == 8u);
  CHECK(bench::parse_size("1K") == 1024u);
  CHECK(bench::parse_size("1k") == 1024u);
  CHECK(bench::parse_size("64M") == 64u << 20);
  CHECK(bench::parse_size("64MB") == 64u << 20);
  CHECK(bench::parse_size("1G") == 1u << 30);
  CHECK(bench::parse_size("0.5K") == 512u);
  CHECK_FALSE(bench::parse_size(""));
  CHECK_FALSE(bench::parse_size("-1"));
  CHECK_FALSE(bench::parse_size("12Q"));
  CHECK_FALSE(bench::parse_size("1.3"));

  auto error = [](std::vector<std::string> words) -> std::string {
    try {
      (void)bench_options(std::move(words));
    } catch (const bench::UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK_THAT(error({"-b", "1X"}), Catch::Contains("-b expects a size"));
  CHECK_THAT(error({"-b", "2M", "-e", "1M"}), Catch::Contains("larger than -e"));
  CHECK_THAT(error({"-o", "mean"}), Catch::Contains("'mean'"));
  CHECK_THAT(error({"-d", "float8"}), Catch::Contains("'float8'"));
  CHECK_THAT(error({"--backend", "gloo"}), Catch::Contains("tcp or nccl"));
  CHECK_THAT(error({"-g", "2"}), Catch::Contains("one GPU per process"));
  CHECK_THAT(error({"-t", "4"}), Catch::Contains("one rank per process"));
  CHECK_THAT(error({"-z", "4"}), Catch::Contains("-z expects an integer in [0, 3]"));
  CHECK_THAT(error({"-i", "0", "-b", "1", "-e", "2"}), Catch::Contains("never reach -e"));
  CHECK_THAT(error({"--frobnicate"}), Catch::Contains("unknown flag"));
  CHECK_THAT(error({"-n"}), Catch::Contains("expects a value"));
  CHECK_THAT(error({"-R", "2"}), Catch::Contains("-R expects an integer in [0, 1]"));
  CHECK_THAT(error({"-R", "1", "--backend", "nccl"}),
             Catch::Contains("drop it with --backend nccl"));
}

TEST_CASE("benchmarks: busbw factors as nccl-tests documents them", "[launcher][bench]") {
  using bench::Coll;
  CHECK(bench::busbw_factor(Coll::all_reduce, 4) == Approx(1.5));
  CHECK(bench::busbw_factor(Coll::all_reduce, 1) == Approx(0.0));
  CHECK(bench::busbw_factor(Coll::all_gather, 4) == Approx(0.75));
  CHECK(bench::busbw_factor(Coll::reduce_scatter, 2) == Approx(0.5));
  CHECK(bench::busbw_factor(Coll::alltoall, 8) == Approx(0.875));
  CHECK(bench::busbw_factor(Coll::broadcast, 8) == Approx(1.0));
  CHECK(bench::busbw_factor(Coll::reduce, 8) == Approx(1.0));
  CHECK(bench::busbw_factor(Coll::sendrecv, 8) == Approx(1.0));
}

TEST_CASE("benchmarks: every pattern reduces exactly in every type", "[launcher][bench]") {
  using chorus::DataType;
  using chorus::ReduceOp;
  const DataType types[] = {DataType::int8,    DataType::uint8,   DataType::int32,
                            DataType::uint32,  DataType::int64,   DataType::uint64,
                            DataType::float16, DataType::float32, DataType::float64,
                            DataType::bfloat16};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                          ReduceOp::avg};
  for (DataType dt : types) {
    for (ReduceOp op : ops) {
      for (int n : {1, 2, 3, 4, 7, 8, 16, 33}) {
        bench::Pattern p;
        p.dtype = dt;
        p.op = op;
        p.nranks = n;
        p.seed = 5;
        bool ranks_differ = n == 1 || op == ReduceOp::prod;
        for (std::size_t i = 0; i < 300; ++i) {
          // Each input and the result survive a round trip through the type unchanged, so the
          // reduction computed in the type itself (fp16/bf16 via fp32, rounded once) is exact.
          std::int64_t sum = 0;
          for (int r = 0; r < n; ++r) {
            const std::int64_t v = bench::input_value(p, r, i);
            unsigned char buf[8];
            bench::store_value(dt, v, buf);
            INFO(chorus::to_string(dt) << " " << chorus::to_string(op) << " n=" << n << " i=" << i);
            REQUIRE(bench::load_value(dt, buf) == static_cast<double>(v));
            REQUIRE(v >= 0);
            sum += v;
            if (r > 0 && v != bench::input_value(p, 0, i)) {
              ranks_differ = true;
            }
          }
          const std::int64_t want = bench::reduced_value(p, i);
          unsigned char buf[8];
          bench::store_value(dt, want, buf);
          INFO(chorus::to_string(dt) << " " << chorus::to_string(op) << " n=" << n << " i=" << i);
          REQUIRE(bench::load_value(dt, buf) == static_cast<double>(want));
          // Partial sums stay exact too: the total is within the type's exact range.
          unsigned char sbuf[8];
          bench::store_value(dt, sum, sbuf);
          if (op == ReduceOp::sum || op == ReduceOp::avg) {
            REQUIRE(bench::load_value(dt, sbuf) == static_cast<double>(sum));
          }
          if (op == ReduceOp::avg) {
            REQUIRE(sum % n == 0);
          }
        }
        if (op != ReduceOp::prod) {
          CHECK(ranks_differ);
        }
      }
    }
  }
  // Plain data patterns (allgather, broadcast ...) differ by rank and by index.
  bench::Pattern data;
  data.dtype = DataType::bfloat16;
  data.nranks = 4;
  CHECK(bench::input_value(data, 0, 0) != bench::input_value(data, 1, 0));
  CHECK(bench::input_value(data, 0, 0) != bench::input_value(data, 0, 1));
}
