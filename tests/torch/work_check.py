# SPDX-License-Identifier: BSD-3-Clause
"""A torch Work's life without an unbounded wait(): dropped while its op is in flight, polled
with is_completed(), followed through get_future(), waited on with a bound, waited for
inside a future's callback. Nothing registers on a chorus op until one of these needs it, so
each must still finish the op by itself. Rank 0 is the one whose Work is in flight: the others hold their side of each op back
until rank 0 has done what it tests (a gloo barrier), so the op cannot have completed before.
Outputs are non-contiguous views (transposed), which chorus stages: only the finisher puts the
result into them. A hang is a failure (polls give up after POLL_S)."""
import datetime
import threading
import time

import torch
import torch.distributed as dist

from common import check, fail, init, say

POLL_S = 60.0

rank, n = init()
gloo = dist.new_group(backend="gloo")
cases = []


def rank0_first(issue, meanwhile=lambda w: None):
    """issue() -> Work on every rank, then meanwhile(work); rank 0 does both before the other
    ranks issue (they wait for it in a gloo barrier), so there its op is in flight throughout."""
    if rank != 0:
        dist.barrier(group=gloo)
    w = issue()
    meanwhile(w)
    if rank == 0:
        dist.barrier(group=gloo)
    return w


def column(value):
    """A (3, 4) view of a (4, 3) tensor: non-contiguous, so chorus works on a staging copy."""
    t = (torch.zeros(4, 3) + value).t()
    check(not t.is_contiguous(), "the test view should be non-contiguous")
    return t


def poll(cond, what):
    deadline = time.monotonic() + POLL_S
    while not cond():
        if time.monotonic() > deadline:
            fail(f"{what}: still not done after {POLL_S:.0f} s")


def same(t, want, what):
    if not torch.equal(t, want):
        fail(f"{what}: got {t.tolist()}, want {want.tolist()}")


# 1. A Work dropped while its op is in flight: the result still lands in the user's tensor
#    (the staging copy is kept, and copied out when the op completes), as with gloo.
#    Every rank drops both; the inputs too are dropped (all_gather's is a temporary).
src = n - 1
dropped = column(float(src) if rank == src else -1.0)
dropped_list = [column(-1.0) for _ in range(n)]


def issue_and_drop():
    dist.broadcast(dropped, src=src, async_op=True)  # the Work is dropped at once
    dist.all_gather(dropped_list, torch.full((3, 4), float(rank)), async_op=True)


def untouched(_):
    if rank == 0:
        same(dropped, torch.full((3, 4), -1.0), "dropped broadcast before its source sent")


rank0_first(issue_and_drop, untouched)
dist.barrier()
poll(lambda: torch.equal(dropped, torch.full((3, 4), float(src))) and
     all(torch.equal(t, torch.full((3, 4), float(j))) for j, t in enumerate(dropped_list)),
     "a dropped broadcast / all_gather into non-contiguous tensors never got the result "
     f"(broadcast {dropped.tolist()}, all_gather {[t[0, 0].item() for t in dropped_list]})")
cases.append("dropped in flight")

# 2. is_completed() polled until true, no wait(): the Work completes by itself, finisher run.
want = torch.full((3, 4), float(sum(range(1, n + 1))))
polled = column(float(rank + 1))


def not_yet(w):
    if rank == 0:
        check(not w.is_completed(), "all_reduce completed before the other ranks issued theirs")


w = rank0_first(lambda: dist.all_reduce(polled, async_op=True), not_yet)
poll(w.is_completed, "is_completed() polled without wait()")
same(polled, want, "polled all_reduce result")
del w
cases.append("is_completed polled")

# 3. get_future().then(): the future completes from chorus's callback thread, never from the
#    thread in wait(); the Work itself may be dropped once its future was asked for.
main_thread = threading.get_ident()
ran_on = []
chained = []
fut_t = column(float(rank + 1))


def doubled(f):
    ran_on.append(threading.get_ident())
    return f.value()[0] * 2


def chain(w):
    fut = w.get_future()
    chained.append(fut.then(doubled))
    if rank == 0:
        check(not fut.done(), "future done before the other ranks issued their all_reduce")


w = rank0_first(lambda: dist.all_reduce(fut_t, async_op=True), chain)
check(w.wait(), "work.wait() returned False")
poll(chained[0].done, "future.then() of an all_reduce")
if rank == 0:  # registered before the op completed: runs where the future completes
    check(ran_on[0] != main_thread, "the future completed on the thread in wait()")
same(fut_t, want, "all_reduce with a future")
same(chained[0].value(), want.contiguous() * 2, "future.then() value")
del w
lone_t = column(7.0 if rank == src else -1.0)
lone = []
w = rank0_first(lambda: dist.broadcast(lone_t, src=src, async_op=True),
                lambda w: lone.append(w.get_future().then(lambda f: f.value()[0].sum().item())))
del w  # only the future is left
poll(lone[0].done, "the future of a dropped broadcast Work")
same(lone_t, torch.full((3, 4), 7.0), "broadcast through a future only")
check(lone[0].value() == 84.0, f"future.then() of a dropped Work: {lone[0].value()}")
cases.append("get_future().then")

# 4. A bounded wait: runs out while the op is in flight (the op goes on), then succeeds.
bounded = column(float(rank + 1))


def runs_out(w):
    if rank == 0:
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=200))
            fail("wait(timeout=200 ms) returned while the other ranks had not issued the op")
        except RuntimeError as e:
            check("still running" in str(e), f"bounded wait's error: {e}")


w = rank0_first(lambda: dist.all_reduce(bounded, async_op=True), runs_out)
check(w.wait(timeout=datetime.timedelta(seconds=POLL_S)), "bounded wait returned False")
check(w.is_completed(), "not completed after a bounded wait returned")
same(bounded, want, "all_reduce after bounded wait")
cases.append("bounded wait")

# 5. A future's callback that issues an op and waits for that op's future (torch's PowerSGD
#    hook does, in compute_qs). On rank 0 the callback runs on chorus's callback thread (the
#    outer op was in flight when it was registered), and the inner op is in flight when its
#    future is asked for: it must complete although the callback thread is the one waiting.
outer_t = torch.full((2,), float(rank + 1))
inner_t = column(float(rank + 1))
nested = []


def issue_inner_and_wait(f):
    if rank != 0:
        dist.barrier(group=gloo)  # after rank 0 has asked for the inner op's future
    fut = dist.all_reduce(inner_t, async_op=True).get_future()
    if rank == 0:
        check(not fut.done(), "the inner all_reduce completed before the other ranks issued it")
        dist.barrier(group=gloo)
    return fut.wait()[0] + f.value()[0].sum()


rank0_first(lambda: dist.all_reduce(outer_t, async_op=True),
            lambda w: nested.append(w.get_future().then(issue_inner_and_wait)))
poll(nested[0].done, "a callback waiting for the future of an op it issued")
same(nested[0].value(), want.contiguous() + 2 * want[0, 0], "the nested future's value")
cases.append("future waited in a callback")

dist.barrier()
say(f"OK work: {', '.join(cases)}")
dist.destroy_process_group()
