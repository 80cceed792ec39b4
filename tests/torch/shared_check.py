# SPDX-License-Identifier: BSD-3-Clause
"""chorus.torch.shared_empty(): tensors in SharedBuffers. Shapes and dtypes as torch.zeros makes
them; all_reduce, broadcast, all_gather_into_tensor and reduce_scatter_tensor of 1 MiB over them
exact, and the peers' buffers mapped (the single-copy path ran); then a rank that passes an
ordinary tensor where the others pass shared ones fails on every rank, naming SharedBuffer
memory."""
import gc

import torch
import torch.distributed as dist

import chorus.torch
from common import all_gather_into_tensor, check, fail, init, reduce_scatter_tensor, say

rank, n = init()


def mapped():
    with open("/proc/self/maps") as maps:
        return sum("/memfd:chorus-shared-buffer" in line for line in maps)


# Shapes and dtypes as torch.zeros takes them.
for args, want in (((3, 4), (3, 4)), (((2, 5),), (2, 5)), ((torch.Size([7]),), (7,)), ((0,), (0,))):
    t = chorus.torch.shared_empty(*args, dtype=torch.int32)
    check(t.shape == torch.Size(want) and t.dtype == torch.int32, f"shape {args}: {t.shape}")
    check(bool((t == 0).all()), f"shape {args}: not zero-filled")
for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int8, torch.bool):
    t = chorus.torch.shared_empty(5, dtype=dtype)
    check(t.dtype == dtype and t.numel() == 5, f"dtype {dtype}")
check(chorus.torch.shared_empty(2).dtype == torch.get_default_dtype(), "default dtype")

count = 1 << 18  # 1 MiB of float32 per rank
x = chorus.torch.shared_empty(count)
x.copy_(torch.arange(count, dtype=torch.float32) % 7 + rank + 1)
dist.all_reduce(x)
want = (torch.arange(count, dtype=torch.float32) % 7) * n + n * (n + 1) / 2
check(torch.equal(x, want), "all_reduce over shared tensors")

b = chorus.torch.shared_empty(count)
if rank == n - 1:
    b.fill_(42.0)
dist.broadcast(b, src=n - 1)
check(bool((b == 42.0).all()), "broadcast over shared tensors")

piece = chorus.torch.shared_empty(count // n, dtype=torch.int64)
piece.fill_(rank)
gathered = chorus.torch.shared_empty(count // n * n, dtype=torch.int64)
all_gather_into_tensor(gathered, piece)
want = torch.arange(n, dtype=torch.int64).repeat_interleave(count // n)
check(torch.equal(gathered, want), "all_gather_into_tensor over shared tensors")

whole = chorus.torch.shared_empty(count)
whole.fill_(rank + 1.0)
part = chorus.torch.shared_empty(count // n)
reduce_scatter_tensor(part, whole)
check(bool((part == n * (n + 1) / 2).all()), "reduce_scatter_tensor over shared tensors")

# With this rank's own buffers freed, what is still mapped are the peers', which the group keeps
# for the next op: there would be none had the ops gone through the rings.
del t, x, b, piece, gathered, whole, part
gc.collect()
peers = mapped()
check(peers > 0, "no peer buffer mapped: the ops did not take the single-copy path")

# The last op: the group is aborted afterwards.
mine = chorus.torch.shared_empty(count) if rank != 0 else torch.zeros(count)
try:
    dist.all_reduce(mine)
    fail("a rank without SharedBuffer memory did not fail the op")
except RuntimeError as e:
    check("SharedBuffer memory on every rank or on none" in str(e), f"the error: {e}")
say(f"OK shared: 4 ops exact over SharedBuffer tensors, {peers} peer mappings, mismatch named")
