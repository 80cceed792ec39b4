# SPDX-License-Identifier: BSD-3-Clause
"""Failures a torch user meets, on the chorus backend. usage: failure_check.py MODE [ARGS]

  killed           rank 1 SIGKILLs itself mid-training; the others must raise promptly (far
                   inside the 60 s timeout), naming rank 1
  stopped          rank 1 SIGSTOPs itself; the others must raise at the 5 s timeout, naming
                   rank 1 (the driver then kills it)
  exit FIRST HOW   after some collectives, ranks leave in an order: FIRST=store (rank 0, which
                   hosts torch's store, leaves first) or others; HOW=destroy
                   (destroy_process_group() then exit) or exit (interpreter exit with the group
                   alive). Ranks that leave second wait until the driver closes their stdin.
  exit_in_callback rank 1 exits while a future callback of its sleeps: exit code 0, no abort
Survivors print "RAISED <seconds> <message>"; every rank that finishes prints "EXITING"."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from common import check, init, say

mode = sys.argv[1]


def train_until_failure(victim_action, timeout_s):
    rank, n = init(timeout_s)
    t = torch.ones(1024)
    dist.barrier()
    start = None
    try:
        for step in range(100000):
            if step == 5:
                start = time.monotonic()
                if rank == 1:
                    victim_action()
            dist.all_reduce(t)
            t.fill_(1.0)
    except RuntimeError as e:
        elapsed = time.monotonic() - start
        say(f"RAISED {elapsed:.3f} {e}")
        check("rank 1" in str(e), f"the error does not name rank 1: {e}")
        return elapsed
    check(False, "the loop ended without an error")


if mode == "killed":
    elapsed = train_until_failure(lambda: os.kill(os.getpid(), signal.SIGKILL), 60)
    check(elapsed < 30, f"raised after {elapsed:.1f} s: a killed rank must be noticed at once, "
          "not at the 60 s timeout")
    dist.destroy_process_group()
elif mode == "stopped":
    elapsed = train_until_failure(lambda: os.kill(os.getpid(), signal.SIGSTOP), 5)
    check(elapsed >= 4, f"raised after {elapsed:.1f} s, before the 5 s timeout")
    dist.destroy_process_group()
elif mode == "exit":
    first, how = sys.argv[2], sys.argv[3]
    rank, n = init(60)
    t = torch.ones(16)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    leaves_first = (rank == 0) == (first == "store")
    if not leaves_first:
        sys.stdin.read()  # until the driver closes it: the first ones are gone
    if how == "destroy":
        dist.destroy_process_group()
    say("EXITING")
elif mode == "exit_in_callback":
    # Rank 1's future callback is asleep (without the GIL) when the interpreter exits with the
    # group alive: its thread must not ask for the GIL once the interpreter finalizes (that
    # thread would be ended by pthread_exit, and the process abort at exit).
    rank, n = init(60)
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        store.wait(["chained"])  # rank 1's callback is pending when the op completes
    fut = dist.all_reduce(torch.ones(1000), async_op=True).get_future()
    if rank == 1:
        fut.then(lambda f: (time.sleep(1.0), f.value()[0])[1])
        store.set("chained", "1")
    fut.wait()
    dist.barrier()
    say("EXITING")
else:
    check(False, f"unknown mode {mode}")
