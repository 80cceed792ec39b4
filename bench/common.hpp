// SPDX-License-Identifier: BSD-3-Clause
// nccl-tests-style benchmarks: flags, size sweep, timing, exact checks, the table and JSON.
// Each *_perf.cpp is a CollBench descriptor handed to run_benchmark().
//
// Conventions follow nccl-tests (doc/PERFORMANCE.md): sizes are bytes per rank of the larger
// buffer; algbw = size / time with GB = 1e9 bytes; busbw = algbw x busbw_factor(); the time
// column is the average time of one op over -n iterations (x -m aggregated ops), taken per rank
// and combined across ranks as -a says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>

namespace bench {

enum class Coll {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  alltoall,
  sendrecv,
  barrier
};

// nccl-tests' bus bandwidth factor: allreduce 2(n-1)/n; allgather, reduce_scatter and alltoall
// (n-1)/n; broadcast, reduce, sendrecv 1; barrier 0 (it moves no data).
double busbw_factor(Coll coll, int nranks);

// ---- flags ---------------------------------------------------------------------------------

struct Options {
  std::size_t min_bytes = 32u << 20;                         // -b
  std::size_t max_bytes = 32u << 20;                         // -e
  std::size_t step_bytes = 1u << 20;                         // -i
  std::size_t step_factor = 1;                               // -f (1: step by -i bytes)
  int iters = 20;                                            // -n
  int warmup_iters = 1;                                      // -w
  int agg_iters = 1;                                         // -m
  int check = 1;                                             // -c: check iterations (0: no check)
  std::vector<chorus::ReduceOp> ops{chorus::ReduceOp::sum};  // -o (all: every op)
  std::vector<chorus::DataType> dtypes{chorus::DataType::float32};  // -d (all: every type)
  int root = 0;                                                     // -r
  int blocking = 0;    // -z: 0 issue all, wait at end; 1 wait+barrier each op;
                       //     2 wait each op; 3 wait+barrier each iteration
  int average = 1;     // -a: 0 rank 0, 1 average, 2 min, 3 max across ranks
  int timeout_s = 0;   // -T: op deadline in seconds (0: the library default)
  int nthreads = 1;    // -t: only 1 (one rank per process)
  int ngpus = 1;       // -g: only 1 (one GPU per process, nccl backend)
  int registered = 0;  // -R: 1 = buffers are chorus::SharedBuffers (tcp; nccl-tests' -R 1)
  chorus::Backend backend = chorus::Backend::tcp;  // --backend
  std::string json_path;                           // --json
  // --wire: the wire of the reductions between hosts (AllreduceOptions::wire_dtype); unset:
  // CHORUS_WIRE_DTYPE's, which the group applies itself. The check's inputs are then small
  // enough that every partial sum is exact in it.
  std::optional<chorus::DataType> wire;
  int corrupt_rank = -1;  // test hook --test-corrupt-rank (see docs/architecture.md)
  bool help = false;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses nccl-tests flags (short and long forms) plus --backend, --json. Throws UsageError.
Options parse_options(int argc, const char* const* argv);
// "64M" -> 67108864; K, M, G (powers of 1024, case-insensitive, optional trailing B); nullopt
// if malformed.
std::optional<std::size_t> parse_size(const std::string& text);
const char* usage();

// ---- data ----------------------------------------------------------------------------------

// nccl-tests' type names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
const char* type_name(chorus::DataType dtype);
const char* op_name(chorus::ReduceOp op);

// The value patterns. Every value is a small non-negative integer chosen so that the result of
// any op over the group is exactly representable in the type (fp16 and bf16 included): sums
// stay below the type's largest exact integer, products are powers of two below it, and the
// avg pattern makes every sum a multiple of the group size. Values differ by rank and index.
struct Pattern {
  chorus::DataType dtype = chorus::DataType::float32;
  std::optional<chorus::ReduceOp> op;  // unset: plain data (no reduction follows)
  int nranks = 1;
  int seed = 0;
  std::optional<chorus::DataType> wire;  // Options::wire, where the op reduces float data
};
// The wire an op of `dtype` and `op` is issued with under --wire `wire`: the library's rules
// (float32 data as bfloat16 or float16, float64 data as float32; sum and avg), nullopt elsewhere.
std::optional<chorus::DataType> wire_of(std::optional<chorus::DataType> wire,
                                        chorus::DataType dtype, chorus::ReduceOp op);
// Rank `rank`'s value at element `index` of its input.
std::int64_t input_value(const Pattern& p, int rank, std::size_t index);
// The reduction over every rank of input_value(p, r, index).
std::int64_t reduced_value(const Pattern& p, std::size_t index);
// Writes `value` as one element of dtype at dst.
void store_value(chorus::DataType dtype, std::int64_t value, void* dst);
// Reads one element back as a double (for messages).
double load_value(chorus::DataType dtype, const void* src);

// ---- descriptors ---------------------------------------------------------------------------

// Elements of each buffer for one row (nccl-tests' getCollByteCount).
struct Counts {
  std::size_t send = 0;   // input elements per rank
  std::size_t recv = 0;   // output elements per rank
  std::size_t param = 0;  // the "count" column
  // In place: the input starts at recvbuf + send_inplace_offset * rank and the output at
  // recvbuf + recv_inplace_offset * rank.
  std::size_t send_inplace_offset = 0;
  std::size_t recv_inplace_offset = 0;
};

// One issue of the op on this rank.
struct Call {
  chorus::ProcessGroup& group;
  chorus::Tensor send;  // input view (in place: a view into recvbuf)
  chorus::Tensor recv;  // output view
  chorus::ReduceOp op;
  int root;
  bool in_place;
  std::uint32_t tag;                     // distinct per issue (point-to-point)
  std::optional<chorus::DataType> wire;  // --wire (reductions)
};

struct CollBench {
  const char* program;  // "all_reduce_perf"
  Coll coll;
  bool uses_op;       // redop column and -o apply
  bool uses_root;     // root column and -r apply
  bool has_in_place;  // false: the in-place columns print N/A
  Counts (*counts)(std::size_t count, int nranks);
  // This rank's input element i, and its expected output element i (nullopt: this rank has no
  // output to check, e.g. reduce off the root).
  std::int64_t (*input)(const Pattern& p, int rank, int root, std::size_t i, const Counts& c);
  std::optional<std::int64_t> (*expected)(const Pattern& p, int rank, int root, bool in_place,
                                          std::size_t i, const Counts& c);
  // Issues the op; appends the Work(s) it returned.
  void (*run)(const Call& call, std::vector<std::shared_ptr<chorus::Work>>& works);
};

// The whole program: flags, init_from_env, sweep, table, exit status (0, or 1 if any element
// was wrong; 2 for bad flags; 3 for a chorus error).
int run_benchmark(int argc, char** argv, const CollBench& bench);

}  // namespace bench
