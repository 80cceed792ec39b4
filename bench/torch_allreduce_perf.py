#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""allreduce through torch.distributed, nccl-tests columns, for any CPU backend.

One command runs every backend named in --backends at every world size in -n, on this machine,
one launch after the other, and prints a table per (n, backend), then the comparison: chorus's
busbw over gloo's at the largest size, chorus's time over gloo's at the smallest, and what the
torch bridge costs over chorus's own C++ all_reduce_perf at the smallest size (run here, in the
same command, when build/bench/all_reduce_perf exists: paired launches, see bridge_cost).

    /usr/bin/python3 bench/torch_allreduce_perf.py                # gloo and chorus, n = 2 and 4
    /usr/bin/python3 bench/torch_allreduce_perf.py -n 4 --backends chorus -b 1M -e 1M

Times are medians over --repeats batches of ops (each batch's time / ops in it), taken as the
slowest rank's median: a shared machine is noisy and the median keeps one bad batch out.
float32 sum, in place (torch's all_reduce is in place). Each size is checked once before it is
timed (every element must equal the exact sum); a wrong element is counted in #wrong and fails
the run.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 8, 64K, 64M)")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def sizes(begin, end, factor):
    """begin, begin*factor, ... up to end, and end itself: the rows the summary compares."""
    out = []
    s = begin
    while s < end:
        out.append(s)
        s *= factor
    out.append(end)
    return out


def iterations(size):
    """Ops per timed batch: many for small sizes (the timer's resolution), few for large ones."""
    return max(3, min(100, (256 << 20) // max(size, 1)))


# ---------------------------------------------------------------------------------- worker


def worker(args):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    if args.backend == "chorus":
        import chorus.torch  # noqa: F401 - registers the backend
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=timedelta(seconds=args.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for size in sizes(args.begin, args.end, args.factor):
        count = size // 4
        t = torch.full((count,), float(rank + 1), dtype=torch.float32)
        dist.all_reduce(t)
        wrong = int((t != float(n * (n + 1) // 2)).sum())
        t.zero_()  # sums of zeros stay exact and finite however many ops run
        iters = iterations(size)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        batch_us = []
        for _ in range(args.repeats):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            batch_us.append((time.perf_counter() - start) / iters * 1e6)
        # The slowest rank's median and every rank's wrong elements, through the backend itself.
        summary = torch.tensor([statistics.median(batch_us), float(wrong)], dtype=torch.float64)
        dist.all_reduce(summary[0:1], op=dist.ReduceOp.MAX)
        dist.all_reduce(summary[1:2])
        rows.append({"size": size, "count": count, "time_us": float(summary[0]),
                     "wrong": int(summary[1])})
    if rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------- driver


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_backend(args, backend, n):
    """Launches n ranks of this script (env://) and returns rank 0's rows."""
    port = free_port()
    env = dict(os.environ)
    pythonpath = os.path.join(args.build_dir, "python")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(n),
                "USE_LIBUV": "0",  # Debian's torch 2.6 is built without libuv
                "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", backend,
           "-b", str(args.begin), "-e", str(args.end), "-f", str(args.factor),
           "-w", str(args.warmup), "-r", str(args.repeats), "--timeout", str(args.timeout)]
    procs = []
    for r in range(n):
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + args.deadline
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{backend} n={n}: ranks still running after {args.deadline} s")
        outputs.append(out)
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{backend} n={n} failed:\n" + "\n".join(outputs))
    for line in outputs[0].splitlines():
        if line.startswith("ROWS "):
            return json.loads(line[5:])
    raise SystemExit(f"{backend} n={n}: rank 0 printed no results:\n{outputs[0]}")


def busbw(row, n):
    """nccl-tests' allreduce bus bandwidth in GB/s: algbw x 2(n-1)/n."""
    algbw = row["size"] / 1e9 / (row["time_us"] / 1e6)
    return algbw, algbw * 2 * (n - 1) / n


def print_table(backend, n, rows):
    print(f"# torch.distributed all_reduce, backend {backend}, {n} ranks, float32 sum, in place")
    print(f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'time':>10} {'algbw':>8} "
          f"{'busbw':>8} {'#wrong':>7}")
    print(f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'(us)':>10} {'(GB/s)':>8} "
          f"{'(GB/s)':>8}")
    for row in rows:
        algbw, bus = busbw(row, n)
        print(f"{row['size']:>12} {row['count']:>13} {'float':>9} {'sum':>7} "
              f"{row['time_us']:>10.2f} {algbw:>8.3f} {bus:>8.3f} {row['wrong']:>7}")
    print(flush=True)


def cpp_time_us(args, n, size):
    """chorus's C++ all_reduce_perf in-place time at `size`, waiting for each op as torch's
    all_reduce does (-z 2), slowest rank (-a 3); None when the build has no benchmarks."""
    chorusrun = os.path.join(args.build_dir, "tools", "chorusrun")
    bench = os.path.join(args.build_dir, "bench", "all_reduce_perf")
    if not (os.access(chorusrun, os.X_OK) and os.access(bench, os.X_OK)):
        return None
    out = subprocess.run([chorusrun, "--standalone", "-n", str(n), bench, "-b", str(size),
                          "-e", str(size), "-n", str(iterations(size) * args.repeats),
                          "-z", "2", "-w", str(args.warmup), "-a", "3"],
                         capture_output=True, text=True, timeout=args.deadline)
    if out.returncode != 0:
        raise SystemExit(f"all_reduce_perf n={n} failed:\n{out.stdout}{out.stderr}")
    for line in out.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == str(size):
            return float(fields[9])  # the in-place time column
    raise SystemExit(f"all_reduce_perf n={n} printed no row for {size} B:\n{out.stdout}")


def bridge_cost(args, n, size):
    """What the torch bridge adds per op at `size`: rounds that each launch chorus through
    torch and the C++ benchmark back to back, so both see the same machine; the medians of
    both and of the per-round differences. None without the C++ benchmark."""
    if cpp_time_us(args, n, size) is None:
        return None
    one_size = argparse.Namespace(**dict(vars(args), begin=size, end=size))
    torch_us, cpp_us = [], []
    for _ in range(args.bridge_rounds):
        torch_us.append(run_backend(one_size, "chorus", n)[0]["time_us"])
        cpp_us.append(cpp_time_us(args, n, size))
    diffs = [t - c for t, c in zip(torch_us, cpp_us)]
    return statistics.median(torch_us), statistics.median(cpp_us), statistics.median(diffs)


def compare(args, n, results):
    gloo, chorus = results.get("gloo"), results.get("chorus")
    if not chorus:
        return
    small, large = chorus[0], chorus[-1]
    if gloo:
        bus_ratio = busbw(large, n)[1] / busbw(gloo[-1], n)[1] if n > 1 else float("nan")
        time_ratio = small["time_us"] / gloo[0]["time_us"]
        print(f"# n={n}: at {large['size']} B chorus busbw / gloo busbw = {bus_ratio:.2f} "
              f"(target >= 2)")
        print(f"# n={n}: at {small['size']} B chorus time / gloo time = {time_ratio:.2f} "
              f"(target <= 0.5)")
    bridge = bridge_cost(args, n, small["size"]) if args.bridge_rounds > 0 else None
    if bridge is not None:
        print(f"# n={n}: at {small['size']} B over {args.bridge_rounds} paired rounds: chorus "
              f"through torch {bridge[0]:.2f} us, C++ all_reduce_perf -z 2 {bridge[1]:.2f} us, "
              f"torch bridge (median difference) {bridge[2]:.2f} us (target <= 10)")
    print(flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="gloo,chorus", help="comma list (default gloo,chorus)")
    ap.add_argument("-n", "--nranks", default="2,4", help="world sizes, comma list (default 2,4)")
    ap.add_argument("-b", "--minbytes", dest="begin", type=parse_size, default=8)
    ap.add_argument("-e", "--maxbytes", dest="end", type=parse_size, default=64 << 20)
    ap.add_argument("-f", "--stepfactor", dest="factor", type=int, default=8)
    ap.add_argument("-w", "--warmup", type=int, default=5, help="untimed ops per size")
    ap.add_argument("-r", "--repeats", type=int, default=5, help="timed batches per size")
    ap.add_argument("--bridge-rounds", type=int, default=7,
                    help="paired torch / C++ launches that measure the bridge (0: skip)")
    ap.add_argument("--timeout", type=float, default=120, help="init_process_group timeout, s")
    ap.add_argument("--deadline", type=float, default=900, help="hard limit per launch, s")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.begin < 4 or args.end < args.begin or args.factor < 2:
        ap.error("need 4 <= minbytes <= maxbytes and stepfactor >= 2")
    if args.worker:
        return worker(args)
    wrong = 0
    for n in (int(x) for x in args.nranks.split(",")):
        results = {}
        for backend in args.backends.split(","):
            results[backend] = run_backend(args, backend, n)
            print_table(backend, n, results[backend])
            wrong += sum(r["wrong"] for r in results[backend])
        compare(args, n, results)
    if wrong:
        raise SystemExit(f"{wrong} wrong elements")


if __name__ == "__main__":
    main()
