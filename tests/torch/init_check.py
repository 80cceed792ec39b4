# SPDX-License-Identifier: BSD-3-Clause
"""init_process_group("chorus", ...) with each way torch offers to rendezvous.
usage: init_check.py METHOD SHARED   (RANK and WORLD_SIZE in the environment)

  tcp    init_method="tcp://127.0.0.1:PORT" with rank= and world_size= (PORT = SHARED)
  file   init_method="file://PATH" (PATH = SHARED, a file name in a fresh directory)
  store  store=dist.TCPStore(...) made by the script (rank 0 hosts it on port SHARED)

Each rank then checks an allreduce, a broadcast and a subgroup allreduce, destroys the group,
and prints "OK init METHOD"."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

from common import check, say

method, shared = sys.argv[1], sys.argv[2]
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=60)
if method == "tcp":
    dist.init_process_group("chorus", init_method=f"tcp://127.0.0.1:{shared}", rank=rank,
                            world_size=n, timeout=timeout)
elif method == "file":
    dist.init_process_group("chorus", init_method=f"file://{shared}", rank=rank, world_size=n,
                            timeout=timeout)
elif method == "store":
    # torch 2.x defaults to a libuv server, which Debian 13's torch is built without.
    extra = {"use_libuv": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
    store = dist.TCPStore("127.0.0.1", int(shared), n, rank == 0, timeout, **extra)
    dist.init_process_group("chorus", store=store, rank=rank, world_size=n, timeout=timeout)
else:
    raise SystemExit(f"unknown method {method!r}")

check(dist.get_backend() == "chorus", f"backend is {dist.get_backend()}")
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
check(bool((t == n * (n + 1) / 2).all()), f"allreduce gave {t[:4]}")
b = torch.full((7,), float(rank))
dist.broadcast(b, src=n - 1)
check(bool((b == n - 1).all()), f"broadcast gave {b}")
evens = dist.new_group([r for r in range(n) if r % 2 == 0])
if rank % 2 == 0:
    s = torch.ones(3)
    dist.all_reduce(s, group=evens)
    check(bool((s == (n + 1) // 2).all()), f"subgroup allreduce gave {s}")
dist.barrier()
dist.destroy_process_group()
say(f"OK init {method}")
