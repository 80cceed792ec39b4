# SPDX-License-Identifier: BSD-3-Clause
"""Nothing user code does on a callback or with the GIL is taken for a dead rank; a stopped rank
still is. Run under chorusrun with the default peer timeout (10 s) and a 300 s op timeout, so
that a stall longer than the peer timeout is survived only if the heartbeats never wait on user
code. usage: liveness_check.py FLAG_DIR [PHASE...]  (FLAG_DIR: a directory every rank sees;
PHASE: one of those below, all by default)

  callback   every rank chains a 15 s then() callback on an allreduce's future and goes on
             with allreduces meanwhile (they complete: only what depends on the callback waits);
             the callback's result is exact
  gil        rank 1 holds the GIL for 15 s in one call (ctypes.PyDLL: no release) with a Python
             callback pending on an allreduce's future; the other ranks wait for it in a barrier
  hook       DDP with a comm hook whose callback sleeps 15 s on rank 1 in the second step;
             parameters after three steps equal a local reference on every rank
  stop       rank 1 is stopped (SIGSTOP) for 20 s in an allreduce loop: the others raise
             naming rank 1 within the peer timeout (not at the op timeout), and rank 1, resumed,
             fails too
Each rank prints "OK <phase> <seconds>" per phase and "OK liveness" at the end."""
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common import check, init, say

STALL_S = 15  # past the 10 s default peer timeout
STOP_S = 20
OP_TIMEOUT_S = 300

rank, n = init(OP_TIMEOUT_S)
expected = n * (n + 1) / 2  # sum of rank + 1


MAIN_THREAD = threading.get_ident()
store = dist.distributed_c10d._get_default_store()


def issued_last_by(holder, key):
    """An allreduce that `holder` issues only once every other rank has issued it and called
    `key`'s callback registration: on the others it cannot be complete yet when they chain a
    callback on its future (torch runs a callback on an already complete future inline, on the
    calling thread, which is not what is tested here). Returns (future, register)."""
    t = torch.full((1000,), float(rank + 1))
    if rank == holder:
        store.wait([f"liveness/{key}/{r}" for r in range(n) if r != holder])
    fut = dist.all_reduce(t, async_op=True).get_future()

    def registered():
        if rank != holder:
            store.set(f"liveness/{key}/{rank}", "1")

    return fut, registered


def slow_callback(f):
    thread = threading.get_ident()
    time.sleep(STALL_S)
    return f.value()[0] * 2, thread


def phase_callback():
    # Round a: rank 0 issues last, the others chain a 15 s callback; round b: rank 1 issues
    # last, rank 0 chains one. Every rank gets one, pending when its op completes.
    slow = []
    for key, holder, slow_here in (("a", 0, rank != 0), ("b", 1, rank == 0)):
        fut, registered = issued_last_by(holder, key)
        if slow_here:
            slow.append(fut.then(slow_callback))
        registered()
    # Other ops go on while the callback sleeps, until it is done on every rank (a MIN over a
    # flag, so every rank runs the same number of rounds).
    start = time.monotonic()
    rounds = 0
    while True:
        x = torch.full((16,), float(rank + 1))
        dist.all_reduce(x)
        check(torch.all(x == expected).item(), f"allreduce during the callback: {x[:4]}")
        rounds += 1
        done = torch.tensor([1.0 if all(f.done() for f in slow) else 0.0])
        dist.all_reduce(done, op=dist.ReduceOp.MIN)
        if done.item() == 1.0 or time.monotonic() - start > 2 * STALL_S:
            break
        time.sleep(0.05)  # pacing, not synchronization: a few hundred rounds are plenty
    check(all(f.done() for f in slow), f"the {STALL_S} s callback did not end within {2 * STALL_S} s")
    check(rounds > 1, "no allreduce completed while the callback slept")
    for f in slow:
        value, thread = f.value()
        check(thread != MAIN_THREAD, "the callback ran on the main thread: the test is void")
        check(torch.all(value == 2 * expected).item(), f"callback result {value[:4]}")
    return f"{rounds} allreduces meanwhile"


def phase_gil(flag_dir):
    # Rank 0 issues the allreduce once rank 1 holds the GIL: rank 1's Python callback, chained
    # before, is pending (and needs the GIL) for the whole hold.
    flag = os.path.join(flag_dir, "rank1-holds-the-gil")
    t = torch.full((1000,), float(rank + 1))
    if rank == 0:
        deadline = time.monotonic() + 60
        while not os.path.exists(flag):  # polled, bounded
            check(time.monotonic() < deadline, "rank 1 never raised its flag")
            time.sleep(0.01)
    fut = dist.all_reduce(t, async_op=True).get_future()
    ran = []
    doubled = fut.then(lambda f: (ran.append(time.monotonic()), f.value()[0] * 2)[1])
    if rank == 1:
        # One call that holds the GIL throughout (PyDLL: no release): it raises the flag, then
        # sleeps.
        began = time.monotonic()
        ctypes.PyDLL(None).system(f"touch '{flag}' && sleep {STALL_S}".encode())
        held = time.monotonic() - began
        check(held >= STALL_S, f"the GIL was held {held:.1f} s only")
    dist.barrier()  # the other ranks wait here for rank 1 through the stall
    check(torch.all(doubled.wait() == 2 * expected).item(), f"callback result {doubled.value()}")
    if rank == 1:
        check(ran and ran[0] >= began + STALL_S - 1,
              "rank 1's callback ran before the GIL hold ended: the test is void")


class SlowOnce:
    """DDP comm hook state: rank 1's hook callback sleeps in the second step, chained before
    rank 0 issues that step's allreduce (so it is pending when the allreduce completes)."""

    def __init__(self):
        self.step = 0
        self.slow_thread = None


def slow_hook(state, bucket):
    slow_step = state.step == 1
    if slow_step and rank == 0:
        store.wait(["liveness/hook-chained"])
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def average(f):
        if rank == 1 and slow_step:
            state.slow_thread = threading.get_ident()
            time.sleep(STALL_S)
        return f.value()[0] / n

    averaged = fut.then(average)
    if slow_step and rank == 1:
        store.set("liveness/hook-chained", "1")
    return averaged


def phase_hook():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    state = SlowOnce()
    ddp = DDP(model)
    ddp.register_comm_hook(state, slow_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)

    def batch(r, step):
        g = torch.Generator().manual_seed(1000 * step + r)
        return torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)

    for step in range(3):
        state.step = step
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        # The reference: the average of every rank's gradient, computed here alone.
        ref_opt.zero_grad()
        for r in range(n):
            rx, ry = batch(r, step)
            (nn.functional.mse_loss(reference(rx), ry) / n).backward()
        ref_opt.step()
    if rank == 1:
        check(state.slow_thread not in (None, MAIN_THREAD),
              "the slow hook callback ran on the main thread: the test is void")
    for p, q in zip(model.parameters(), reference.parameters()):
        diff = (p.detach() - q.detach()).abs().max().item()
        check(diff < 1e-5, f"DDP with the slow hook differs from the reference by {diff}")


def phase_stop():
    t = torch.ones(1024)
    dist.barrier()
    start = None
    try:
        for step in range(1000000):
            if step == 5:
                start = time.monotonic()
                if rank == 1:
                    # Resumed after STOP_S by a helper, as a debugger or a job scheduler would.
                    subprocess.Popen(["sh", "-c", f"sleep {STOP_S}; kill -CONT {os.getpid()}"],
                                     start_new_session=True)
                    os.kill(os.getpid(), signal.SIGSTOP)
            dist.all_reduce(t)
            t.fill_(1.0)
    except RuntimeError as e:
        elapsed = time.monotonic() - start
        say(f"RAISED {elapsed:.1f} {str(e)[:300]}")
        if rank != 1:
            check("rank 1" in str(e), f"the error does not name rank 1: {e}")
            check(elapsed < STOP_S - 2,
                  f"raised after {elapsed:.1f} s: a stopped rank must be named within the 10 s "
                  f"peer timeout, not when it resumes ({STOP_S} s) or at the op timeout")
        return f"raised after {elapsed:.1f} s"
    check(False, "the loop ended without an error")


PHASES = {"callback": phase_callback, "gil": lambda: phase_gil(sys.argv[1]), "hook": phase_hook,
          "stop": phase_stop}
for name in sys.argv[2:] or PHASES:
    phase = PHASES[name]
    began = time.monotonic()
    detail = phase()
    say(f"OK {name} {time.monotonic() - began:.1f} s" + (f" ({detail})" if detail else ""))
say("OK liveness")
