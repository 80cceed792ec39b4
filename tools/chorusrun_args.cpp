// SPDX-License-Identifier: BSD-3-Clause
// chorusrun's flag parser: torchrun's spellings, strict values, clear errors.
#include "chorusrun_args.hpp"

#include "cli_number.hpp"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace chorusrun {
namespace {

long long parse_int(const std::string& flag, const std::string& value, long long min,
                    long long max) {
  if (auto v = chorus::cli::parse_int_in(value, min, max)) {
    return *v;
  }
  throw UsageError(chorus::cli::int_expected(flag, value, min, max));
}

double parse_seconds(const std::string& flag, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || errno != 0 || *end != '\0' || !(v >= 0) || v > 86400) {
    throw UsageError(flag + " expects seconds (0..86400), got '" + value + "'");
  }
  return v;
}

// "--nproc_per_node" -> "--nproc-per-node"; short flags unchanged.
std::string normalize(std::string_view flag) {
  std::string out(flag);
  if (out.size() > 2 && out[0] == '-' && out[1] == '-') {
    for (std::size_t i = 2; i < out.size(); ++i) {
      if (out[i] == '_') {
        out[i] = '-';
      }
    }
  }
  return out;
}

}  // namespace

RunArgs parse_args(int argc, const char* const* argv) {
  RunArgs args;
  int i = 1;
  for (; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (word.empty() || word[0] != '-' || word == "-") {
      break;  // the program
    }
    std::string flag = word;
    std::optional<std::string> inline_value;
    if (const auto eq = word.find('='); word.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = word.substr(0, eq);
      inline_value = word.substr(eq + 1);
    }
    flag = normalize(flag);
    // Flags without a value.
    if (flag == "--help" || flag == "-h") {
      args.help = true;
      continue;
    }
    if (flag == "--help-env") {
      args.help_env = true;
      continue;
    }
    if (flag == "--version") {
      args.version = true;
      continue;
    }
    if (flag == "--standalone") {
      args.standalone = true;
      continue;
    }
    if (flag == "--no-python") {
      args.no_python = true;
      continue;
    }
    if (flag == "--no-prefix-output" || flag == "--no-prefix") {
      args.prefix = PrefixMode::never;
      continue;
    }
    if (flag == "--prefix-output" || flag == "--prefix") {
      args.prefix = PrefixMode::always;
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
    if (flag == "--nproc-per-node" || flag == "-n") {
      args.nproc_per_node = static_cast<int>(parse_int(flag, value(), 1, 4096));
    } else if (flag == "--nnodes") {
      const std::string v = value();
      // torchrun accepts MIN:MAX for elastic jobs; chorusrun runs a fixed size.
      if (const auto colon = v.find(':'); colon != std::string::npos) {
        const auto lo = parse_int(flag, v.substr(0, colon), 1, 65536);
        const auto hi = parse_int(flag, v.substr(colon + 1), 1, 65536);
        if (lo != hi) {
          throw UsageError("--nnodes " + v +
                           ": chorusrun runs a fixed number of nodes (MIN == MAX)");
        }
        args.nnodes = static_cast<int>(lo);
      } else {
        args.nnodes = static_cast<int>(parse_int(flag, v, 1, 65536));
      }
    } else if (flag == "--node-rank") {
      args.node_rank = static_cast<int>(parse_int(flag, value(), 0, 65535));
    } else if (flag == "--master-addr") {
      args.master_addr = value();
      if (args.master_addr.empty()) {
        throw UsageError("--master-addr expects a host name or address");
      }
    } else if (flag == "--master-port") {
      args.master_port = static_cast<int>(parse_int(flag, value(), 1, 65535));
    } else if (flag == "--rdzv-endpoint") {
      // host[:port] or [v6addr][:port], as torchrun's rendezvous takes it.
      const std::string v = value();
      std::string host = v;
      std::string port;
      if (!v.empty() && v.front() == '[') {
        const auto close = v.find(']');
        if (close == std::string::npos ||
            (close + 1 < v.size() && (v[close + 1] != ':' || close + 2 >= v.size()))) {
          throw UsageError("--rdzv-endpoint " + v + ": expected [addr]:port");
        }
        host = v.substr(1, close - 1);
        port = close + 1 < v.size() ? v.substr(close + 2) : "";
      } else if (const auto colon = v.find(':'); colon != std::string::npos) {
        if (v.find(':', colon + 1) != std::string::npos) {
          throw UsageError("--rdzv-endpoint " + v + ": write IPv6 addresses as [addr]:port");
        }
        host = v.substr(0, colon);
        port = v.substr(colon + 1);
      }
      if (host.empty()) {
        throw UsageError("--rdzv-endpoint " + v + ": no host");
      }
      args.master_addr = host;
      if (!port.empty()) {
        args.master_port = static_cast<int>(parse_int(flag, port, 1, 65535));
      }
    } else if (flag == "--max-restarts") {
      args.max_restarts = static_cast<int>(parse_int(flag, value(), 0, 1000000));
    } else if (flag == "--elastic") {
      args.elastic = true;
    } else if (flag == "--min-ranks") {
      args.min_ranks = static_cast<int>(parse_int(flag, value(), 1, 1000000));
    } else if (flag == "--token-file") {
      args.token_file = value();
      if (args.token_file.empty()) {
        throw UsageError("--token-file expects a file holding the job token");
      }
    } else if (flag == "--log-dir") {
      args.log_dir = value();
      if (args.log_dir.empty()) {
        throw UsageError("--log-dir expects a directory");
      }
    } else if (flag == "--tee" || flag == "-t") {
      args.tee = static_cast<int>(parse_int(flag, value(), 0, 3));
    } else if (flag == "--redirects" || flag == "-r") {
      args.redirects = static_cast<int>(parse_int(flag, value(), 0, 3));
    } else if (flag == "--bind-to") {
      const std::string v = value();
      if (v == "none") {
        args.bind = BindTo::none;
      } else if (v == "core") {
        args.bind = BindTo::core;
      } else {
        throw UsageError("--bind-to expects none or core, got '" + v + "'");
      }
    } else if (flag == "--kill-timeout") {
      args.kill_timeout_s = parse_seconds(flag, value());
    } else if (flag == "--rdzv-backend" || flag == "--rdzv-id" || flag == "--monitor-interval" ||
               flag == "--role" || flag == "--rdzv-conf" || flag == "--start-method") {
      (void)value();  // accepted for torchrun compatibility; chorusrun has one behavior
    } else {
      throw UsageError("unknown flag " + word + " (see chorusrun --help)");
    }
  }
  for (; i < argc; ++i) {
    args.program.emplace_back(argv[i]);
  }
  if (args.help || args.help_env || args.version) {
    return args;
  }
  if (args.program.empty()) {
    throw UsageError("no program given: chorusrun [flags] [--] PROGRAM [ARGS...]");
  }
  if (args.node_rank >= args.nnodes) {
    throw UsageError("--node-rank " + std::to_string(args.node_rank) + " is not below --nnodes " +
                     std::to_string(args.nnodes));
  }
  if (args.standalone) {
    if (args.nnodes != 1) {
      throw UsageError("--standalone runs one node; drop --nnodes or --standalone");
    }
    args.master_addr = "127.0.0.1";
    args.master_port = 0;  // the store picks a free port
  }
  if (args.elastic) {
    const long long started = static_cast<long long>(args.nnodes) * args.nproc_per_node;
    if (args.min_ranks > started) {
      throw UsageError("--min-ranks " + std::to_string(args.min_ranks) +
                       " is more than the ranks started (--nnodes x --nproc-per-node = " +
                       std::to_string(started) + ")");
    }
  }
  const long long world = static_cast<long long>(args.nnodes) * args.nproc_per_node;
  if (world > 1000000) {
    throw UsageError("--nnodes x --nproc-per-node is too large");
  }
  return args;
}

const char* usage() {
  return R"(usage: chorusrun [flags] [--] PROGRAM [ARGS...]

Starts PROGRAM once per local rank with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
CHORUS_RESTART_COUNT, CHORUS_STORE_ADDR), hosts the chorus store on node rank 0, relays the
ranks' output line by line, and stops every rank when one fails. Lines get a "[rank N] " prefix
once a second rank writes to the same stream (stdout or stderr), so output only one rank writes,
such as a benchmark table, stays bare.

  -n, --nproc-per-node N   processes on this node (default 1)
      --nnodes N           number of nodes (default 1); every node runs chorusrun
      --node-rank R        this node's index (default 0); node 0 hosts the store
      --master-addr HOST   store host (default 127.0.0.1)
      --master-port PORT   store port (default 29500)
      --rdzv-endpoint HOST[:PORT]   the same, torchrun style
      --standalone         one node, store on a free port of 127.0.0.1
      --max-restarts K     restart the ranks up to K times after a failure (default 0); with
                           --nnodes > 1 a failure on any node restarts every node's ranks
      --elastic            a rank that fails does not stop the others while --min-ranks still
                           run (the program recovers with ProcessGroup::shrink); the job
                           succeeds if at least --min-ranks ranks exit 0. With --max-restarts K,
                           up to K failed ranks are restarted as joiners of the running job
                           (CHORUS_ELASTIC_JOIN=1; ProcessGroup::grow lets them in). With
                           --nnodes > 1 both counts are the job's; a lost node's ranks leave
                           together
      --min-ranks N        with --elastic: the fewest ranks the job goes on with (default 1)
      --token-file F       the job's store token (first line of F, 16+ bytes; default:
                           CHORUS_STORE_TOKEN, else one made up per launch on one node). With
                           --nnodes > 1 give every node the same one, or the store is open
      --log-dir DIR        also write each rank's output to DIR/attempt_K/RANK/{stdout,stderr}.log
  -t, --tee 0-3            streams copied to the log files (1 stdout, 2 stderr, 3 both);
                           without --log-dir a temporary directory is made
  -r, --redirects 0-3      streams sent to the log files only, not to the console
      --kill-timeout SECS  grace between SIGTERM and SIGKILL when stopping ranks (default 10)
      --bind-to none|core  core: each local rank runs on whole cores of its own, chorusrun's
                           cores (its CPU affinity) split evenly, as mpirun --bind-to core;
                           an error when the ranks outnumber the cores. Ranks that wait by
                           spinning then never share a core. What a rank starts (data
                           loader workers) inherits its cores. Default none
      --prefix             prefix every output line with "[rank N] "
      --no-prefix          never prefix output lines
      --no-python          run a PROGRAM ending in .py as it is, not under Python ($CHORUS_PYTHON,
                           else python3 on PATH)
      --rdzv-backend, --rdzv-id, --monitor-interval, --role, --start-method
                           accepted for torchrun compatibility (no effect)
      --help-env           the environment variables chorus reads
      --version            chorus version
  -h, --help               this text

Exit status: 0 when every rank exits 0; otherwise the failing rank's exit code (128+N if it was
killed by signal N), after the last allowed restart; 128+N when chorusrun itself got signal N
(it forwards SIGINT, SIGTERM and SIGHUP to every rank); 2 for a bad command line.
)";
}

}  // namespace chorusrun
