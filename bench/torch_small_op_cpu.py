#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""CPU time per blocking dist.broadcast through the chorus backend, on rank 0.

    PYTHONPATH=build/python build/tools/chorusrun --standalone -n 2 \\
        /usr/bin/python3 bench/torch_small_op_cpu.py [--numel 2] [--ops 2000] [--reps 7]

Each rank runs --reps rounds of --ops `dist.broadcast(torch.zeros(numel), 0)`, each only
waited on (no future, no callback); a barrier starts every round. Rank 0 prints each round's
CPU time per op (time.process_time: every thread of the process, the caller's, the progress
engine's and any callback thread's) and their median. CPU time, not wall time: on a shared
2-core machine the wall time of a small op swings with thread wake-up latency. To compare two
builds, alternate launches of each on the same machine.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401 - registers the backend


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--numel", type=int, default=2, help="float32 elements (2: 8 bytes)")
    ap.add_argument("--ops", type=int, default=2000, help="broadcasts per round (2000)")
    ap.add_argument("--reps", type=int, default=7, help="rounds (7)")
    args = ap.parse_args()
    dist.init_process_group("chorus")
    t = torch.zeros(args.numel)
    for _ in range(100):  # warm-up: connections, first-use allocations
        dist.broadcast(t, 0)
    per_op = []
    for _ in range(args.reps):
        dist.barrier()
        start = time.process_time()
        for _ in range(args.ops):
            dist.broadcast(t, 0)
        per_op.append((time.process_time() - start) / args.ops * 1e6)
    if dist.get_rank() == 0:
        print(f"broadcast {args.numel * 4} B x {args.ops}, {dist.get_world_size()} ranks: CPU us "
              f"per op on rank 0: {' '.join(f'{x:.1f}' for x in per_op)}; "
              f"median {statistics.median(per_op):.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
