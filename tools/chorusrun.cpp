// SPDX-License-Identifier: BSD-3-Clause
// chorusrun: a torchrun-compatible launcher that hosts the chorus store and supervises ranks.
//
// Node rank 0 runs the TcpStoreServer inside chorusrun (as torchrun's agent does), so the
// store outlives a crashed rank 0 and survives restarts; ranks find it through MASTER_ADDR /
// MASTER_PORT and CHORUS_STORE_ADDR (which tells init_from_env that a server already runs).
// The attempts themselves are in chorusrun_supervisor.cpp.
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>

#include <chorus/chorus.hpp>

#include "chorusrun_args.hpp"
#include "chorusrun_elastic.hpp"
#include "chorusrun_rounds.hpp"
#include "chorusrun_supervisor.hpp"
#include "token_file.hpp"

extern char** environ;

namespace {

// PATH lookup done before any fork, so the child only calls execve.
std::string resolve_program(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    return executable(name) ? name : std::string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    auto end = dirs.find(':', start);
    if (end == std::string::npos) {
      end = dirs.size();
    }
    std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) {
      return candidate;
    }
    start = end + 1;
  }
  return {};
}

// "chorusrun-<16 hex digits>" from the system's random source.
std::string random_run_id() {
  std::random_device rd;
  char text[40];
  std::snprintf(text, sizeof(text), "chorusrun-%08x%08x", rd(), rd());
  return text;
}

// 32 random bytes as hex: the job token of a one-node launch without one.
std::string random_token() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 8; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", rd());
    token += part;
  }
  return token;
}

// The job's store token: --token-file, else CHORUS_STORE_TOKEN, else (one node) a new one.
// Empty with --nnodes > 1 and none given: the nodes could not agree on a made-up one.
std::string store_token(const chorusrun::RunArgs& args) {
  if (!args.token_file.empty()) {
    auto token = chorus::cli::read_token_file(args.token_file);
    if (!token) {
      throw chorusrun::UsageError("--token-file " + args.token_file + ": " + std::strerror(errno));
    }
    return *token;
  }
  if (const char* env = std::getenv("CHORUS_STORE_TOKEN"); env != nullptr && *env != '\0') {
    return env;
  }
  return args.nnodes == 1 ? random_token() : std::string();
}

// Variables chorusrun sets for each rank; inherited values of these are dropped.
bool set_by_chorusrun(const char* entry) {
  static const char* const kNames[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK",
                                       "GROUP_WORLD_SIZE",
                                       "ROLE_RANK",
                                       "ROLE_WORLD_SIZE",
                                       "ROLE_NAME",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "CHORUS_STORE_ADDR",
                                       "CHORUS_STORE_TOKEN",
                                       "CHORUS_LAUNCHER",
                                       "CHORUS_RESTART_COUNT",
                                       "TORCHELASTIC_RESTART_COUNT",
                                       "TORCHELASTIC_MAX_RESTARTS"};
  for (const char* name : kNames) {
    const std::size_t n = std::strlen(name);
    if (std::strncmp(entry, name, n) == 0 && entry[n] == '=') {
      return true;
    }
  }
  return false;
}

// The run id every rank of this launch gets (CHORUS_RUN_ID), or "" when the user set one (it is
// inherited). Unique per launch: node 0 makes one up and keeps it in its store, where the
// other nodes' chorusruns read it, so every node names the same run.
std::string chorusrun_run_id(const chorusrun::RunArgs& args, const chorusrun::LaunchPlan& plan) {
  if (std::getenv("CHORUS_RUN_ID") != nullptr) {
    return {};
  }
  if (args.nnodes == 1) {
    return random_run_id();
  }
  const std::string key = "chorusrun/run_id";
  chorus::TcpStore store(
      chorus::TcpStoreOptions{.host = plan.store_host,
                              .port = static_cast<std::uint16_t>(plan.store_port),
                              .token = plan.store_token});
  if (args.node_rank == 0) {
    store.set(key, random_run_id());
  }
  return store.get_string(key);
}

// A TCP port on `host` that nothing listens on now, held for the rest of chorusrun's life: a
// socket bound to it with SO_REUSEADDR that never listens (CLOEXEC: the ranks do not inherit
// it). While it is bound the kernel hands the port to no other bind(0) or connect(), so no
// program that looks for a free port at the same time (another chorusrun, a test, torchrun)
// takes MASTER_PORT before rank 0's store binds it; the store still binds and listens there,
// because torch's TCPStore (like every server that rebinds after a restart) sets SO_REUSEADDR
// too, and only a listener blocks that. Releasing the port at once instead left a window of
// seconds (the ranks' Python and torch imports) in which a busy machine handed it out again.
// 0 if `host` has no address here (a remote store host: node 0 picks).
int hold_free_port_on(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &found) != 0) {
    return 0;
  }
  int port = 0;
  for (addrinfo* a = found; a != nullptr && port == 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      continue;
    }
    const int one = 1;
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    if (port == 0) {
      ::close(fd);
    }  // else: held (leaked on purpose) until chorusrun exits
  }
  ::freeaddrinfo(found);
  return port;
}

// The ranks' MASTER_PORT (see LaunchPlan::torch_master_port): node 0 picks it, holds it (see
// hold_free_port_on) and keeps it in its store, where the other nodes' chorusruns read it.
int torch_master_port(const chorusrun::RunArgs& args, const chorusrun::LaunchPlan& plan) {
  const std::string key = "chorusrun/torch_master_port";
  if (args.nnodes == 1) {
    return hold_free_port_on(plan.store_host);
  }
  chorus::TcpStore store(
      chorus::TcpStoreOptions{.host = plan.store_host,
                              .port = static_cast<std::uint16_t>(plan.store_port),
                              .token = plan.store_token});
  if (args.node_rank == 0) {
    store.set(key, std::to_string(hold_free_port_on(plan.store_host)));
  }
  return std::atoi(store.get_string(key).c_str());
}

void print_help_env() {
  std::fputs(chorus::environment_help(), stdout);
  std::fputs(
      "\nSet by chorusrun for each rank:\n"
      "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,\n"
      "ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,\n"
      "MASTER_PORT           a free port on MASTER_ADDR for PyTorch's env:// store (not chorus's)\n"
      "CHORUS_STORE_ADDR     the store chorusrun hosts (init_from_env connects, hosts nothing)\n"
      "CHORUS_RUN_ID         kept if set, else made up per launch (node 0's, on every node)\n"
      "CHORUS_LAUNCHER       chorusrun\n"
      "CHORUS_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT   0 on the first attempt, +1 per restart\n"
      "TORCHELASTIC_MAX_RESTARTS                          --max-restarts\n",
      stdout);
}

}  // namespace

// Anything thrown outside the launch's own handling (a store that cannot start, a full disk)
// ends chorusrun with its message and status 1, never through std::terminate.
int main(int argc, char** argv) try {
  using namespace chorusrun;
  LaunchPlan plan;
  try {
    plan.args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "chorusrun: %s\n", e.what());
    return 2;
  }
  const RunArgs& args = plan.args;
  if (args.help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  if (args.help_env) {
    print_help_env();
    return 0;
  }
  if (args.version) {
    std::printf("chorusrun (chorus %s)\n", chorus::version());
    return 0;
  }
  if (!args.no_python && args.program[0].size() > 3 &&
      args.program[0].compare(args.program[0].size() - 3, 3, ".py") == 0) {
    const char* python = std::getenv("CHORUS_PYTHON");
    plan.args.program.insert(plan.args.program.begin(),
                             python != nullptr && *python != '\0' ? python : "python3");
  }
  plan.program_path = resolve_program(args.program[0]);
  if (plan.program_path.empty()) {
    std::fprintf(stderr, "chorusrun: %s: not found or not executable%s\n", args.program[0].c_str(),
                 args.program[0].find('/') == std::string::npos
                     ? " in PATH (give a path, e.g. ./build/bench/all_reduce_perf)"
                     : "");
    return 127;
  }
  if (args.bind == BindTo::core) {
    try {
      plan.bindings = split_cores(allowed_cores(), args.nproc_per_node);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "chorusrun: %s\n", e.what());
      return 2;
    }
    std::string where;
    for (std::size_t r = 0; r < plan.bindings.size(); ++r) {
      where += (r == 0 ? "" : ", ") + std::string("local rank ") + std::to_string(r) + " on CPUs " +
               cpu_list_string(plan.bindings[r]);
    }
    std::fprintf(stderr, "chorusrun: --bind-to core: %s\n", where.c_str());
  }
  plan.log_dir = args.log_dir;
  if (plan.log_dir.empty() && (args.tee > 0 || args.redirects > 0)) {
    char tmpl[] = "/tmp/chorusrun_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "chorusrun: cannot create a log directory in /tmp: %s\n",
                   std::strerror(errno));
      return 1;
    }
    plan.log_dir = tmpl;
    std::fprintf(stderr, "chorusrun: per-rank logs in %s\n", tmpl);
  }

  // Signals are read from a signalfd; they must be blocked in every thread, so before the
  // store server starts its thread.
  // A signal ignored when chorusrun started stays ignored, for chorusrun and its ranks, as a
  // shell does: a script's background job ignores SIGINT, so the script's Ctrl-C must not be
  // forwarded as a stop (nor nohup's SIGHUP). Blocking it for signalfd would catch it anyway.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t handled;
  ::sigemptyset(&handled);
  ::sigaddset(&handled, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction at_start {};
    if (::sigaction(sig, nullptr, &at_start) == 0 && at_start.sa_handler == SIG_IGN) {
      continue;
    }
    ::sigaddset(&handled, sig);
  }
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  const int signal_fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) {
    std::fprintf(stderr, "chorusrun: signalfd failed: %s\n", std::strerror(errno));
    return 1;
  }
  // Orphans of a rank are reparented to us and reaped (no zombies even under a non-reaping
  // PID 1 in a container).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  std::unique_ptr<chorus::TcpStoreServer> server;
  plan.store_host = args.master_addr;
  plan.store_port = args.master_port;
  try {
    plan.store_token = store_token(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "chorusrun: %s\n", e.what());
    return 2;
  }
  if (plan.store_token.empty() && args.node_rank == 0) {
    std::fprintf(stderr,
                 "chorusrun: no job token (--token-file or CHORUS_STORE_TOKEN): the store on "
                 "%s:%d serves anyone who can connect; give every node the same token to "
                 "require it\n",
                 args.master_addr.c_str(), args.master_port);
  }
  if (args.node_rank == 0) {
    try {
      server = std::make_unique<chorus::TcpStoreServer>(
          chorus::TcpStoreServerOptions{.host = args.master_addr,
                                        .port = static_cast<std::uint16_t>(args.master_port),
                                        .token = plan.store_token});
      plan.store_port = server->port();
    } catch (const chorus::InvalidArgument& e) {
      std::fprintf(stderr, "chorusrun: %s\n", e.what());
      return 2;
    } catch (const chorus::Error& e) {
      std::fprintf(stderr,
                   "chorusrun: cannot host the store on %s:%d: %s\n"
                   "chorusrun: pick another --master-port, or --standalone for a free port\n",
                   args.master_addr.c_str(), args.master_port, e.what());
      return 1;
    }
  }
  for (char** e = environ; *e != nullptr; ++e) {
    if (!set_by_chorusrun(*e)) {
      plan.base_env.emplace_back(*e);
    }
  }
  if (!plan.store_token.empty()) {
    plan.base_env.push_back("CHORUS_STORE_TOKEN=" + plan.store_token);
  }
  try {
    if (const std::string run_id = chorusrun_run_id(args, plan); !run_id.empty()) {
      plan.base_env.push_back("CHORUS_RUN_ID=" + run_id);
    }
    plan.torch_master_port = torch_master_port(args, plan);
    if (plan.torch_master_port == 0) {
      std::fprintf(stderr, "chorusrun: found no free port on %s for MASTER_PORT\n",
                   plan.store_host.c_str());
      return 1;
    }
  } catch (const chorus::Error& e) {
    std::fprintf(stderr,
                 "chorusrun: cannot agree on a run id with node 0's chorusrun at %s:%d: %s\n",
                 plan.store_host.c_str(), plan.store_port, e.what());
    return 1;
  }

  if (args.nnodes > 1) {
    if (args.elastic) {
      return run_elastic_job(plan, signal_fd);  // one attempt; the job goes on without lost ranks
    }
    return run_job_rounds(plan, signal_fd);  // restarts re-form the job on every node
  }
  LocalElasticBudget budget(args.max_restarts);
  for (int attempt = 0;; ++attempt) {
    const AttemptResult result =
        run_attempt(plan, attempt, signal_fd, -1, args.elastic ? &budget : nullptr);
    if (result.kind == AttemptResult::Kind::ok) {
      return 0;
    }
    const int status = exit_status_of(result);
    if (result.kind == AttemptResult::Kind::interrupted || result.interrupt_signal != 0) {
      std::fprintf(stderr, "chorusrun: stopped by %s; exiting with %d\n",
                   signal_name(result.interrupt_signal).c_str(), status);
      return status;
    }
    // --elastic spends the restarts on single ranks (joiners), never on the whole job.
    if (attempt < args.max_restarts && !args.elastic) {
      std::fprintf(stderr, "chorusrun: restarting the local ranks (restart %d of %d)\n",
                   attempt + 1, args.max_restarts);
      continue;
    }
    std::fprintf(stderr, "chorusrun: rank %d failed%s; exiting with %d\n", result.rank,
                 args.max_restarts > 0 ? " and no restarts are left" : "", status);
    return status;
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "chorusrun: %s\n", e.what());
  return 1;
}
