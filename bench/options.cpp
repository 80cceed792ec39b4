// SPDX-License-Identifier: BSD-3-Clause
// The benchmarks' command line (nccl-tests flags plus --backend and --json) and busbw factors.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "../tools/cli_number.hpp"
#include "common.hpp"

namespace bench {

double busbw_factor(Coll coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case Coll::all_reduce:
      return 2.0 * (n - 1) / n;
    case Coll::all_gather:
    case Coll::reduce_scatter:
    case Coll::alltoall:
      return (n - 1) / n;
    case Coll::broadcast:
    case Coll::reduce:
    case Coll::sendrecv:
      return 1.0;
    case Coll::barrier:
      return 0.0;
  }
  return 1.0;
}

std::optional<std::size_t> parse_size(const std::string& text) {
  if (text.empty()) {
    return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !(number >= 0) || text[0] == '-') {
    return std::nullopt;
  }
  std::string_view suffix(end);
  double scale = 1;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k':
      case 'K':
        scale = 1024.0;
        break;
      case 'm':
      case 'M':
        scale = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        scale = 1024.0 * 1024 * 1024;
        break;
      case 'b':
      case 'B':
        break;
      default:
        return std::nullopt;
    }
    suffix.remove_prefix(1);
    if (scale != 1 && !suffix.empty() && (suffix == "B" || suffix == "b")) {
      suffix.remove_prefix(1);
    }
    if (!suffix.empty()) {
      return std::nullopt;
    }
  }
  const double bytes = number * scale;
  if (bytes > 1e15 || bytes != std::floor(bytes)) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(bytes);
}

namespace {

long long parse_int(const std::string& flag, const std::string& value, long long min,
                    long long max) {
  if (auto v = chorus::cli::parse_int_in(value, min, max)) {
    return *v;
  }
  throw UsageError(chorus::cli::int_expected(flag, value, min, max));
}

std::size_t size_arg(const std::string& flag, const std::string& value) {
  auto v = parse_size(value);
  if (!v) {
    throw UsageError(flag + " expects a size in bytes with an optional K, M or G suffix, got '" +
                     value + "'");
  }
  return *v;
}

// Long names (and their hyphenated spellings) to the short flag.
char short_of(std::string_view name) {
  struct Alias {
    const char* name;
    char flag;
  };
  static const Alias kAliases[] = {
      {"nthreads", 't'},       {"ngpus", 'g'},      {"minbytes", 'b'}, {"maxbytes", 'e'},
      {"stepbytes", 'i'},      {"stepfactor", 'f'}, {"iters", 'n'},    {"agg_iters", 'm'},
      {"warmup_iters", 'w'},   {"check", 'c'},      {"op", 'o'},       {"datatype", 'd'},
      {"root", 'r'},           {"blocking", 'z'},   {"average", 'a'},  {"timeout", 'T'},
      {"local_register", 'R'}, {"help", 'h'},
  };
  std::string normalized(name);
  for (char& c : normalized) {
    c = c == '-' ? '_' : c;
  }
  for (const auto& a : kAliases) {
    if (normalized == a.name) {
      return a.flag;
    }
  }
  return 0;
}

// bf16 | fp16 | fp32 (and the dtype names), or off.
std::optional<chorus::DataType> parse_wire(const std::string& v) {
  if (v == "off") {
    return std::nullopt;
  }
  if (v == "bf16" || v == "fp16" || v == "fp32") {
    return v == "bf16"   ? chorus::DataType::bfloat16
           : v == "fp16" ? chorus::DataType::float16
                         : chorus::DataType::float32;
  }
  if (auto dt = chorus::parse_data_type(v)) {
    return dt;
  }
  throw UsageError("--wire (or CHORUS_WIRE_DTYPE) expects bf16, fp16, fp32 or off, got '" + v +
                   "'");
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    std::string flag = word;
    std::optional<std::string> inline_value;
    char key = 0;
    if (word.rfind("--", 0) == 0) {
      if (const auto eq = word.find('='); eq != std::string::npos) {
        flag = word.substr(0, eq);
        inline_value = word.substr(eq + 1);
      }
      const std::string name = flag.substr(2);
      if (name == "backend" || name == "json" || name == "wire" || name == "test-corrupt-rank" ||
          name == "test_corrupt_rank") {
        key = name == "backend" ? 'B' : name == "json" ? 'J' : name == "wire" ? 'W' : 'X';
      } else {
        key = short_of(name);
      }
    } else if (word.size() >= 2 && word[0] == '-' && word[1] != '-') {
      key = word[1];
      flag = word.substr(0, 2);
      if (word.size() > 2) {
        inline_value = word.substr(2);  // -n20, as getopt allows
      }
    }
    if (key == 'h') {
      o.help = true;
      continue;
    }
    auto value = [&]() -> std::string {
      if (inline_value) {
        return *inline_value;
      }
      if (i + 1 >= argc) {
        throw UsageError(flag + " expects a value");
      }
      return argv[++i];
    };
    switch (key) {
      case 'b':
        o.min_bytes = size_arg(flag, value());
        break;
      case 'e':
        o.max_bytes = size_arg(flag, value());
        break;
      case 'i':
        o.step_bytes = size_arg(flag, value());
        break;
      case 'f':
        o.step_factor = static_cast<std::size_t>(parse_int(flag, value(), 1, 1 << 20));
        break;
      case 'n':
        o.iters = static_cast<int>(parse_int(flag, value(), 1, 1 << 24));
        break;
      case 'w':
        o.warmup_iters = static_cast<int>(parse_int(flag, value(), 0, 1 << 24));
        break;
      case 'm':
        o.agg_iters = static_cast<int>(parse_int(flag, value(), 1, 1 << 16));
        break;
      case 'c':
        o.check = static_cast<int>(parse_int(flag, value(), 0, 1 << 16));
        break;
      case 'r':
        o.root = static_cast<int>(parse_int(flag, value(), 0, 1 << 30));
        break;
      case 'z':
        o.blocking = static_cast<int>(parse_int(flag, value(), 0, 3));
        break;
      case 'a':
        o.average = static_cast<int>(parse_int(flag, value(), 0, 3));
        break;
      case 'R':
        o.registered = static_cast<int>(parse_int(flag, value(), 0, 1));
        break;
      case 'T':
        o.timeout_s = static_cast<int>(parse_int(flag, value(), 0, 1 << 24));
        break;
      case 't':
        o.nthreads = static_cast<int>(parse_int(flag, value(), 1, 1 << 10));
        if (o.nthreads != 1) {
          throw UsageError("-t " + std::to_string(o.nthreads) +
                           ": chorus benchmarks run one rank per process (1 thread); start more "
                           "ranks with chorusrun -n N");
        }
        break;
      case 'g':
        o.ngpus = static_cast<int>(parse_int(flag, value(), 1, 1 << 10));
        if (o.ngpus != 1) {
          throw UsageError("-g " + std::to_string(o.ngpus) +
                           ": the nccl backend drives one GPU per process; start one rank per GPU "
                           "with chorusrun -n N");
        }
        break;
      case 'o': {
        const std::string v = value();
        if (v == "all") {
          o.ops = {chorus::ReduceOp::sum, chorus::ReduceOp::prod, chorus::ReduceOp::max,
                   chorus::ReduceOp::min, chorus::ReduceOp::avg};
        } else if (auto op = chorus::parse_reduce_op(v)) {
          o.ops = {*op};
        } else {
          throw UsageError(flag + " expects sum, prod, min, max, avg or all, got '" + v + "'");
        }
        break;
      }
      case 'd': {
        const std::string v = value();
        if (v == "all") {
          o.dtypes = {chorus::DataType::int8,    chorus::DataType::uint8,
                      chorus::DataType::int32,   chorus::DataType::uint32,
                      chorus::DataType::int64,   chorus::DataType::uint64,
                      chorus::DataType::float16, chorus::DataType::float32,
                      chorus::DataType::float64, chorus::DataType::bfloat16};
        } else if (auto dt = chorus::parse_data_type(v)) {
          o.dtypes = {*dt};
        } else {
          throw UsageError(flag +
                           " expects int8, uint8, int32, uint32, int64, uint64, half, float, "
                           "double, bfloat16 or all, got '" +
                           v + "'");
        }
        break;
      }
      case 'B': {
        const std::string v = value();
        auto b = chorus::parse_backend(v);
        if (!b) {
          throw UsageError("--backend expects tcp or nccl, got '" + v + "'");
        }
        o.backend = *b;
        break;
      }
      case 'J':
        o.json_path = value();
        if (o.json_path.empty()) {
          throw UsageError("--json expects a file name");
        }
        break;
      case 'W':
        o.wire = parse_wire(value());
        break;
      case 'X':
        o.corrupt_rank = static_cast<int>(parse_int(flag, value(), 0, 1 << 30));
        break;
      default:
        throw UsageError("unknown flag " + word + " (see --help)");
    }
  }
  if (o.help) {
    return o;
  }
  if (!o.wire) {
    // The group applies CHORUS_WIRE_DTYPE by itself; the check must know it too.
    if (const char* env = std::getenv("CHORUS_WIRE_DTYPE"); env != nullptr && *env != 0) {
      o.wire = parse_wire(env);
    }
  }
  if (o.registered != 0 && o.backend != chorus::Backend::tcp) {
    throw UsageError(
        "-R 1 allocates chorus::SharedBuffers, host memory for the tcp backend; "
        "drop it with --backend nccl");
  }
  if (o.min_bytes > o.max_bytes) {
    throw UsageError("-b (" + std::to_string(o.min_bytes) + ") is larger than -e (" +
                     std::to_string(o.max_bytes) + ")");
  }
  if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes != o.max_bytes) {
    throw UsageError("-i 0 without -f would never reach -e; give -i > 0 or -f > 1");
  }
  return o;
}

const char* usage() {
  return R"(usage: PROGRAM [flags]   (launch with chorusrun -n N, torchrun, mpirun or srun)
  -b, --minbytes SIZE      smallest size in bytes, K/M/G suffixes (default 32M)
  -e, --maxbytes SIZE      largest size (default 32M)
  -i, --stepbytes SIZE     step between sizes when -f is not given (default 1M)
  -f, --stepfactor F       multiply the size by F at each step
  -n, --iters N            timed iterations per size (default 20)
  -w, --warmup_iters N     untimed iterations at the largest and smallest size (default 1)
  -m, --agg_iters N        ops per iteration (default 1)
  -c, --check N            check the result exactly N times per size (default 1; 0: off);
                           any wrong element makes the run exit 1
  -o, --op OP              sum, prod, min, max, avg or all (default sum)
  -d, --datatype T         int8 uint8 int32 uint32 int64 uint64 half float double bfloat16
                           or all (default float)
  -r, --root R             root rank of broadcast and reduce (default 0)
  -z, --blocking 0-3       0 issue every op then wait; 1 wait and barrier after each op;
                           2 wait after each op; 3 wait and barrier after each iteration
  -a, --average 0-3        time reported across ranks: 0 rank 0, 1 average, 2 min, 3 max
                           (default 1)
  -T, --timeout SECS       deadline of each op (default: CHORUS_TIMEOUT or 10 min)
  -R, --local_register 0|1 1: allocate the buffers as chorus::SharedBuffers, which a group on
                           one host maps (single-copy collectives); tcp only (default 0)
  -t, --nthreads 1         accepted; one rank per process
  -g, --ngpus 1            accepted; one GPU per process (nccl backend)
      --backend tcp|nccl   process group backend (default tcp)
      --json FILE          also write every row, the parameters and versions as JSON
      --wire W             bf16, fp16, fp32 or off: the wire of allreduce, reduce_scatter and
                           reduce between hosts (float32 data as 16 bits, float64 as fp32;
                           default: CHORUS_WIRE_DTYPE, else off); busbw counts the data's bytes
  -h, --help               this text
The time column is the average time of one op over -n iterations; algbw = size / time and
busbw = algbw x factor (nccl-tests), in GB/s with GB = 1e9 bytes.
)";
}

}  // namespace bench
