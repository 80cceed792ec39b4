#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""CPU cost of the torch bridge per 8-byte allreduce, one rank, next to chorus's C++ benchmark.

Wall times of small ops on a shared 2-core machine swing by tens of microseconds with thread
wake-up latency; CPU time per op (all threads of the process: caller and progress engine) does
not, so this compares CPU time. One rank (world size 1) keeps the network out: what is left is
the op's path through the engine, plus, for torch, Python, torch.distributed and the bridge.

    /usr/bin/python3 bench/torch_bridge_cost.py [OPS]

Rows: torch's `dist.all_reduce(t)`; the backend object called directly
(`pg.allreduce([t]).wait()`, no torch.distributed Python wrapper); chorus's C++
all_reduce_perf (-z 2: wait for each op, as torch does) under chorusrun, whose CPU time
includes process start-up, so its figure is an upper bound. Rounds interleave the three
and the cost is the median of the per-round differences.
"""
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(os.path.dirname(HERE), "build")


ROUNDS = 9
TORCH_ALLREDUCE = "torch dist.all_reduce"
BACKEND_DIRECT = "backend pg.allreduce().wait()"
CPP = "C++ all_reduce_perf -z 2 (upper bound)"


def torch_paths():
    """Forms a one-rank chorus group; returns {row name: function doing one 8-byte op}."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import socket

    import torch
    import torch.distributed as dist

    import chorus.torch  # noqa: F401 - registers the backend

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      USE_LIBUV="0")
    dist.init_process_group("chorus")
    t = torch.zeros(2)
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    return {TORCH_ALLREDUCE: lambda: dist.all_reduce(t),
            BACKEND_DIRECT: lambda: pg.allreduce([t], opts).wait()}


def measure_in_process(op, ops):
    """(CPU us, wall us) per op; CPU counts every thread of this process."""
    c, w = time.process_time(), time.perf_counter()
    for _ in range(ops):
        op()
    return (time.process_time() - c) / ops * 1e6, (time.perf_counter() - w) / ops * 1e6


def measure_cpp(ops):
    """(CPU us, wall us) per op of chorus's C++ benchmark, one rank, under chorusrun."""
    chorusrun = os.path.join(BUILD, "tools", "chorusrun")
    bench = os.path.join(BUILD, "bench", "all_reduce_perf")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([chorusrun, "--standalone", "-n", "1", bench, "-b", "8", "-e", "8",
                          "-n", str(ops), "-w", "0", "-z", "2", "-c", "0"],
                         capture_output=True, text=True, timeout=600, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = next(ln.split() for ln in out.stdout.splitlines() if ln.split()[:1] == ["8"])
    return used / (2 * ops) * 1e6, float(row[9])  # out-of-place and in-place: 2 x ops


def main():
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    paths = torch_paths()
    samples = {TORCH_ALLREDUCE: [], BACKEND_DIRECT: [], CPP: []}
    # Rounds interleave the three, so a busy moment of the machine hits all of them alike.
    for _ in range(ROUNDS):
        for name, op in paths.items():
            samples[name].append(measure_in_process(op, ops))
        samples[CPP].append(measure_cpp(ops))
    print(f"# 8-byte float32 allreduce, 1 rank, {ops} ops per run, medians of {ROUNDS} "
          "interleaved rounds")
    print(f"# {'path':<40} {'cpu us/op':>10} {'wall us/op':>11}")
    for name, rows in samples.items():
        print(f"  {name:<40} {statistics.median(r[0] for r in rows):>10.2f} "
              f"{statistics.median(r[1] for r in rows):>11.2f}")

    def cost(name):  # median over rounds of this path's CPU time minus C++'s in the same round
        return statistics.median(a[0] - c[0] for a, c in zip(samples[name], samples[CPP]))

    print(f"# bridge CPU cost per op (median of per-round differences): backend "
          f"{cost(BACKEND_DIRECT):.2f} us, with torch.distributed's Python wrapper "
          f"{cost(TORCH_ALLREDUCE):.2f} us (target <= 10)")


if __name__ == "__main__":
    main()
