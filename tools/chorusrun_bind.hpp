// SPDX-License-Identifier: BSD-3-Clause
// --bind-to core: each local rank runs on cores of its own.
//
// Why: ranks that wait by spinning (chorus's small-op paths) lose most when two of them share
// a core. Unbound, the kernel may keep two ranks on one core for tens of milliseconds while
// another core idles (seen with perf sched; a wake-up tends to place the woken task near its
// waker, and the balancer leaves a task that ran a moment ago where it is). Open MPI's mpirun
// binds each rank to a core by default when the ranks do not outnumber the cores.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace chorusrun {

// CPU numbers as the kernel counts them (sched_setaffinity, /proc/cpuinfo).
using CpuList = std::vector<int>;

// The cores chorusrun may run on: the CPUs of its affinity mask (a cpuset, taskset or
// container limit counts), grouped by physical core (the CPUs that are hardware threads of one
// core stay together, from /sys/devices/system/cpu/cpuN/topology/thread_siblings_list; a CPU
// whose topology cannot be read is a core of its own), in the order of each core's first CPU.
std::vector<CpuList> allowed_cores();

// Splits `cores` among `ranks` local ranks: each gets consecutive whole cores, the first
// (cores % ranks) one core more than the others, so every core is used once. Throws UsageError
// naming both counts when there are fewer cores than ranks.
std::vector<CpuList> split_cores(const std::vector<CpuList>& cores, int ranks);

// "0-3,8,10-11" (the kernel's cpulist format), for messages.
std::string cpu_list_string(CpuList cpus);

// "0-3,8" -> {0, 1, 2, 3, 8}; nullopt for anything else (sysfs topology files).
std::optional<CpuList> parse_cpu_list(const std::string& text);

// The kernel's CPU mask for `cpus`, built before fork (a child may not allocate).
std::vector<unsigned long> affinity_mask(const CpuList& cpus);

// Pins the calling thread to `mask` (in a child between fork and exec: its only thread, and
// what exec runs inherits it). One system call, so fit for that child. Returns false, with
// errno set, when the kernel refuses.
bool bind_to(const std::vector<unsigned long>& mask) noexcept;

}  // namespace chorusrun
