# SPDX-License-Identifier: BSD-3-Clause
"""A torch job whose store a stranger reads while it runs (run_torch_tests.py, case "stranger").
usage: secret_check.py   (under chorusrun, CHORUS_TRANSPORT=tcp, 4 ranks)

Each rank joins the chorus group (its setup links: ring neighbours only, so rank 0 holds no
link to rank 2 and would answer a dial claiming rank 2), rank 0 prints where torch's store is
("STORE host port"), and every rank waits until the stranger has tried to join
("stranger/done" in the store, within 60 s). Then an allreduce must be exact (nothing got
injected), and each rank prints "OK secret"."""
import datetime
import os

import torch
import torch.distributed as dist

from common import check, init, say

rank, n = init(timeout_s=60)
if rank == 0:
    say(f"STORE {os.environ['MASTER_ADDR']} {os.environ['MASTER_PORT']}")
# A client of our own: the wait runs out after its timeout rather than hanging.
extra = {"use_libuv": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, False,
                      datetime.timedelta(seconds=60), **extra)
store.get("stranger/done")
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
check(bool((t == n * (n + 1) / 2).all()), f"allreduce gave {t[:4]}")
dist.barrier()
dist.destroy_process_group()
say("OK secret")
