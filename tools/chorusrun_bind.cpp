// SPDX-License-Identifier: BSD-3-Clause
// --bind-to core: the cores chorusrun may use, split among its local ranks.
#include "chorusrun_bind.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>

#include "chorusrun_args.hpp"
#include "cli_number.hpp"

namespace chorusrun {
namespace {

constexpr std::size_t kMaskWordBits = sizeof(unsigned long) * CHAR_BIT;
// Far beyond any machine; only bounds the doubling in allowed_cpus().
constexpr std::size_t kMaxMaskBits = std::size_t{1} << 20;

// The CPUs of this process's affinity mask, ascending. The mask is grown until the kernel's
// fits (it refuses a buffer smaller than its own CPU count with EINVAL).
CpuList allowed_cpus() {
  for (std::size_t bits = 1024; bits <= kMaxMaskBits; bits *= 2) {
    std::vector<unsigned long> mask(bits / kMaskWordBits);
    const long got =
        ::syscall(SYS_sched_getaffinity, 0, mask.size() * sizeof(unsigned long), mask.data());
    if (got < 0 && errno == EINVAL) {
      continue;
    }
    if (got < 0) {
      throw UsageError(std::string("--bind-to core: cannot read chorusrun's CPU affinity: ") +
                       std::strerror(errno));
    }
    CpuList cpus;
    for (std::size_t cpu = 0; cpu < bits; ++cpu) {
      if ((mask[cpu / kMaskWordBits] >> (cpu % kMaskWordBits)) & 1UL) {
        cpus.push_back(static_cast<int>(cpu));
      }
    }
    return cpus;
  }
  throw UsageError("--bind-to core: the kernel's CPU mask is larger than chorusrun reads");
}

// The hardware threads that share `cpu`'s core, {cpu} when sysfs does not say.
CpuList siblings_of(int cpu) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                   "/topology/thread_siblings_list");
  std::string line;
  if (in && std::getline(in, line)) {
    if (auto list = parse_cpu_list(line);
        list && std::find(list->begin(), list->end(), cpu) != list->end()) {
      return *list;
    }
  }
  return {cpu};
}

}  // namespace

std::optional<CpuList> parse_cpu_list(const std::string& text) {
  CpuList cpus;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) {
      end = text.size();
    }
    std::string item = text.substr(pos, end - pos);
    while (!item.empty() && (item.back() == '\n' || item.back() == ' ')) {
      item.pop_back();
    }
    const std::size_t dash = item.find('-');
    const auto first = chorus::cli::parse_int_in(item.substr(0, dash), 0, kMaxMaskBits - 1);
    const auto last = dash == std::string::npos
                          ? first
                          : chorus::cli::parse_int_in(item.substr(dash + 1), 0, kMaxMaskBits - 1);
    if (!first || !last || *last < *first) {
      return std::nullopt;
    }
    for (long long c = *first; c <= *last; ++c) {
      cpus.push_back(static_cast<int>(c));
    }
    pos = end + 1;
  }
  if (cpus.empty()) {
    return std::nullopt;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<CpuList> allowed_cores() {
  const CpuList cpus = allowed_cpus();
  // CPUs in ascending order: each new core starts at its lowest allowed CPU, so cores come out
  // in the order of their first CPU.
  std::vector<CpuList> cores;
  std::set<int> placed;
  for (int cpu : cpus) {
    if (placed.count(cpu) != 0) {
      continue;
    }
    CpuList core;
    for (int sibling : siblings_of(cpu)) {
      // Only siblings this process may use, and each CPU in one core only.
      if (std::binary_search(cpus.begin(), cpus.end(), sibling) && placed.insert(sibling).second) {
        core.push_back(sibling);
      }
    }
    cores.push_back(std::move(core));
  }
  return cores;
}

std::vector<CpuList> split_cores(const std::vector<CpuList>& cores, int ranks) {
  const int n = static_cast<int>(cores.size());
  if (ranks > n) {
    CpuList all;
    for (const CpuList& core : cores) {
      all.insert(all.end(), core.begin(), core.end());
    }
    throw UsageError("--bind-to core: " + std::to_string(ranks) +
                     " ranks on this node but chorusrun may run on " + std::to_string(n) +
                     (n == 1 ? " core" : " cores") + " (CPUs " + cpu_list_string(all) +
                     "); start fewer ranks, allow more CPUs, or use --bind-to none");
  }
  std::vector<CpuList> out(static_cast<std::size_t>(ranks));
  int next = 0;
  for (int r = 0; r < ranks; ++r) {
    CpuList& mine = out[static_cast<std::size_t>(r)];
    const int take = n / ranks + (r < n % ranks ? 1 : 0);
    for (int k = 0; k < take; ++k, ++next) {
      const CpuList& core = cores[static_cast<std::size_t>(next)];
      mine.insert(mine.end(), core.begin(), core.end());
    }
    std::sort(mine.begin(), mine.end());
  }
  return out;
}

std::string cpu_list_string(CpuList cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) {
      ++j;
    }
    if (!out.empty()) {
      out += ',';
    }
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-' + std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<unsigned long> affinity_mask(const CpuList& cpus) {
  const int top = cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end());
  std::vector<unsigned long> mask(static_cast<std::size_t>(top) / kMaskWordBits + 1, 0);
  for (int cpu : cpus) {
    mask[static_cast<std::size_t>(cpu) / kMaskWordBits] |=
        1UL << (static_cast<std::size_t>(cpu) % kMaskWordBits);
  }
  return mask;
}

bool bind_to(const std::vector<unsigned long>& mask) noexcept {
  return ::syscall(SYS_sched_setaffinity, 0, mask.size() * sizeof(unsigned long), mask.data()) == 0;
}

}  // namespace chorusrun
