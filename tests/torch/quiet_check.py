# SPDX-License-Identifier: BSD-3-Clause
"""Group setup prints nothing: the default group and a subgroup made with ranks arriving at
different times, one allreduce on each; the rank prints "quiet: setup done", destroys the groups
(the subgroup still held) and prints "OK quiet BACKEND".
usage: quiet_check.py BACKEND   (RANK, WORLD_SIZE, MASTER_* in the environment)

The ranks are staggered on purpose (not to order anything): rank r starts the default group
0.3 s after rank r-1, so rank 0 and the early members wait for late ones; the subgroup is made
in the reverse order, so the members wait for rank 0. Every waiting role's store waits then run
out at least once, which is what made torch 2.x's TCPStore client log "waitForInput ... timed
out after 100ms" on each of chorus's waiting slices. run_torch_tests.py compares the output
with gloo's, from the same script."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend)

backend = sys.argv[1]
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STAGGER_S = 0.3

time.sleep(STAGGER_S * rank)
dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=60))
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
if not bool((t == n * (n + 1) / 2).all()):
    sys.exit(f"rank {rank}: allreduce gave {t}")
time.sleep(STAGGER_S * (n - 1 - rank))
group = dist.new_group(list(range(n)), backend=backend)
t = torch.ones(4)
dist.all_reduce(t, group=group)
if not bool((t == n).all()):
    sys.exit(f"rank {rank}: subgroup allreduce gave {t}")
# What follows is teardown. The case checks that chorus logs nothing there either; torch's own
# lines are left out: a rank whose store host (rank 0) has exited first still removes its
# group's keys from torch's store, and torch 2.x's TCPStore client logs the closed connection.
# The subgroup stays held through destroy_process_group() where torch shuts its backends down
# (2.7 and later: Backend::shutdown); before, a held chorus subgroup would live on until the
# process exits and its peers would log the lost link, so it is dropped first.
print("quiet: setup done", flush=True)
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 7):
    del group
dist.destroy_process_group()
print(f"OK quiet {backend}", flush=True)
