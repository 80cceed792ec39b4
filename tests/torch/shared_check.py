# SPDX-License-Identifier: BSD-3-Clause
"""chorus.torch.shared_empty(): tensors in SharedBuffers. Shapes and dtypes as torch.zeros makes
them; all_reduce, broadcast, all_gather_into_tensor and reduce_scatter_tensor of 1 MiB over them
exact, and the peers' buffers mapped (the single-copy path ran); share_() moving a tensor into a
SharedBuffer in place; DDP with allreduce_hook against DDP on gloo; then a rank that passes an
ordinary tensor where the others pass shared ones fails on every rank, naming SharedBuffer
memory."""
import gc

import torch
import torch.distributed as dist

import chorus.torch
from torch.nn.parallel import DistributedDataParallel as DDP
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

# share_: a tensor's memory moved into a SharedBuffer in place, values kept, and views made
# before the move follow it; a second call, an empty tensor and a non-CPU one change nothing.
moved = torch.arange(count, dtype=torch.float32)
early_view = moved[10:20]
check(not chorus.torch._C.in_shared_buffer(moved), "an ordinary tensor reads as shared")
check(chorus.torch.share_(moved) is moved, "share_ returns the tensor")
check(chorus.torch._C.in_shared_buffer(moved) and chorus.torch._C.in_shared_buffer(early_view),
      "share_ did not move the storage (or the earlier view did not follow)")
early_view.fill_(-1.0)
check(torch.equal(moved[:10], torch.arange(10.0)) and bool((moved[10:20] == -1).all()) and
      torch.equal(moved[20:], torch.arange(20.0, count)), "share_ lost values")
check(not chorus.torch._C.move_to_shared_buffer(moved), "a second move was not a no-op")
empty = torch.zeros(0)
chorus.torch.share_(empty)
check(not chorus.torch._C.in_shared_buffer(empty), "an empty tensor moved")
try:
    chorus.torch.share_(torch.zeros(4, device="meta"))
    fail("share_ took a tensor that is not on the CPU")
except ValueError as e:
    check("host memory" in str(e), f"the non-CPU error: {e}")
dist.all_reduce(moved)  # every rank moved its tensor: the single-copy path, exact
want = torch.arange(count, dtype=torch.float32) * n
want[10:20] = -n
check(torch.equal(moved, want), "all_reduce over a tensor moved by share_")

# DDP with chorus.torch.allreduce_hook (on chorus, and on a gloo group, where it only averages)
# against DDP on gloo, from the same weights and data: the same parameters after three SGD
# steps, and on chorus the large buckets (whose gradients are views of them) moved into
# SharedBuffers by the hook.
gloo = dist.new_group(backend="gloo")
torch.manual_seed(7)
proto = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 4))
finals, grads_shared = [], []
for group, hooked in ((None, True), (gloo, True), (gloo, False)):
    module = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                 torch.nn.Linear(512, 4))
    module.load_state_dict(proto.state_dict())
    model = DDP(module, process_group=group, gradient_as_bucket_view=True)
    if hooked:  # on gloo the hook averages as DDP does and moves nothing
        model.register_comm_hook(group, chorus.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        x, y = torch.randn(8, 512, generator=data), torch.randn(8, 4, generator=data)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    grads_shared.append(chorus.torch._C.in_shared_buffer(module[0].weight.grad))
    finals.append([p.detach().clone() for p in module.parameters()])
    del model, opt
diff = max(float((a - b).abs().max()) for final in finals[:2] for a, b in zip(final, finals[2]))
check(diff < 1e-5, f"DDP with the hook differs from DDP on gloo by {diff}")
check(grads_shared[0], "the hook did not move the 1 MiB weight's bucket into a SharedBuffer")
check(not grads_shared[1] and not grads_shared[2], "a bucket on gloo reads as shared")

# Rank 0 on ordinary memory, the others on SharedBuffers: the right sum all the same.
mine = chorus.torch.shared_empty(count) if rank != 0 else torch.zeros(count)
mine.copy_(torch.arange(count, dtype=torch.float32) % 7 + rank + 1)
dist.all_reduce(mine)
want = (torch.arange(count, dtype=torch.float32) % 7) * n + n * (n + 1) / 2
check(torch.equal(mine, want), "a mixed allreduce (rank 0 on ordinary memory) is wrong")
say(f"OK shared: 4 ops exact over SharedBuffer tensors, {peers} peer mappings, share_ moved a "
    f"tensor in place, DDP with allreduce_hook = gloo's (max diff {diff:.1g}) with its bucket "
    "shared, mixed memory exact")
