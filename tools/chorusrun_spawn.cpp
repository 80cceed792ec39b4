// SPDX-License-Identifier: BSD-3-Clause
// fork/exec of one rank (see chorusrun_spawn.hpp for the process model).
#include "chorusrun_spawn.hpp"

#include "chorusrun_bind.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace chorusrun {
namespace {

bool make_dirs(const std::string& path) {
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return false;
    }
  }
  return true;
}

int open_log(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    say("cannot open " + path + ": " + std::strerror(errno) + " (logging to the console only)");
  }
  return fd;
}

// Closes every descriptor from 3 up (async-signal-safe).
void close_from_3() {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) {
    return;
  }
#endif
  for (int fd = 3; fd < 65536; ++fd) {
    ::close(fd);
  }
}

[[noreturn]] void child_exec(const char* path, char* const* argv, char* const* envp, int out_w,
                             int err_w, int null_fd, pid_t parent,
                             const std::vector<unsigned long>& cpus) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {  // chorusrun died before the death signal was armed
    ::_exit(128 + SIGKILL);
  }
  ::dup2(null_fd, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  close_from_3();
  sigset_t all;
  ::sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (!cpus.empty() && !bind_to(cpus)) {
    static const char msg[] =
        "chorusrun: the kernel refused to bind the rank to its cores (sched_setaffinity); did "
        "chorusrun's CPUs change since it started? Run with --bind-to none to skip binding\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::execve(path, argv, envp);
  static const char msg[] = "chorusrun: exec failed for the program\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
  ::_exit(127);
}

}  // namespace

std::vector<std::string> rank_env(const LaunchPlan& plan, int attempt, const RankProcess& c) {
  const int rank = c.rank;
  const int local_rank = c.local_rank;
  const RunArgs& a = plan.args;
  const int world = a.nnodes * a.nproc_per_node;
  std::vector<std::string> env = plan.base_env;
  const bool v6 = plan.store_host.find(':') != std::string::npos;
  const std::string store_addr =
      (v6 ? "[" + plan.store_host + "]" : plan.store_host) + ":" + std::to_string(plan.store_port);
  auto set = [&](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(world));
  set("LOCAL_RANK", std::to_string(local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(a.nproc_per_node));
  set("GROUP_RANK", std::to_string(a.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(a.nnodes));
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", std::to_string(world));
  set("ROLE_NAME", "default");
  set("MASTER_ADDR", plan.store_host);
  set("MASTER_PORT", std::to_string(plan.torch_master_port));
  set("CHORUS_STORE_ADDR", store_addr);
  set("CHORUS_LAUNCHER", "chorusrun");
  set("CHORUS_RESTART_COUNT", std::to_string(attempt));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts));
  if (c.rejoins > 0) {
    set("CHORUS_ELASTIC_JOIN", "1");  // init_from_env joins the running world group
  }
  return env;
}

void open_rank_logs(const std::string& log_dir, int attempt, RankProcess& c) {
  const std::string dir = log_dir + "/attempt_" + std::to_string(attempt) + "/" +
                          std::to_string(c.rank) +
                          (c.rejoins > 0 ? ".rejoin" + std::to_string(c.rejoins) : "");
  if (make_dirs(dir)) {
    c.out.log = open_log(dir, "stdout.log");
    c.err.log = open_log(dir, "stderr.log");
  } else {
    say("cannot create " + dir + ": " + std::strerror(errno));
  }
}

bool spawn_rank(const LaunchPlan& plan, int attempt, RankProcess& c, int null_fd) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    say(std::string("pipe failed: ") + std::strerror(errno));
    return false;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    say(std::string("pipe failed: ") + std::strerror(errno));
    ::close(out[0]);
    ::close(out[1]);
    return false;
  }
  // Everything the child needs, built before fork (the child may not allocate).
  std::vector<std::string> env = rank_env(plan, attempt, c);
  std::vector<char*> envp;
  for (auto& e : env) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.args.program;
  std::vector<char*> argv;
  for (auto& s : args) {
    argv.push_back(s.data());
  }
  argv.push_back(nullptr);
  const std::vector<unsigned long> cpus =
      plan.bindings.empty() ? std::vector<unsigned long>{}
                            : affinity_mask(plan.bindings[static_cast<std::size_t>(c.local_rank)]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    say(std::string("fork failed: ") + std::strerror(errno));
    for (int fd : {out[0], out[1], err[0], err[1]}) {
      ::close(fd);
    }
    return false;
  }
  if (pid == 0) {
    child_exec(plan.program_path.c_str(), argv.data(), envp.data(), out[1], err[1], null_fd, parent,
               cpus);
  }
  ::setpgid(pid, pid);  // also here, so kill(-pid) works before the child ran
  ::close(out[1]);
  ::close(err[1]);
  for (int fd : {out[0], err[0]}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  c.pid = pid;
  c.running = true;
  c.out.fd = out[0];
  c.err.fd = err[0];
  return true;
}

}  // namespace chorusrun
