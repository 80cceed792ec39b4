# SPDX-License-Identifier: BSD-3-Clause
"""chorus's 16-bit wire in DDP against torch's compression hooks, same model, same batches.

Each rank counts as a host of its own (CHORUS_HOST_ID), so every link carries the wire. DDP
copies of one model take one step on each rank's own batch:
- chorus.torch.bf16_wire_hook, and the same with a float16 wire (chorus.torch.wire_dtype);
- torch's fp16_compress_hook on a gloo group, and torch's bf16_compress_hook on gloo where gloo
  takes bfloat16 (torch 1.13's and 2.6's gloo do not: "Invalid scalar type"), else on the chorus
  group (the same rounding: every input rounded, every addition rounded);
- full precision (chorus, no hook).
Each rank also computes the exact average gradient in float64 (every rank's batch is
reproducible). Checks: each wire hook's error is below its compression hook's, the wire hook's
gradients are the same bits on every rank, and a few training steps with it leave every rank
with the same parameters. Prints one "OK wire:" line with the relative errors.
"""
import copy
import hashlib
import os
import sys

RANK = int(os.environ["RANK"])
os.environ["CHORUS_HOST_ID"] = f"host-{RANK}"  # read when the group forms

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import chorus.torch  # noqa: E402
from common import init  # noqa: E402


def fp16_wire_hook(process_group, bucket):
    """bf16_wire_hook with a float16 wire (what a user writes with chorus.torch.wire_dtype)."""
    tensor = bucket.buffer()
    with chorus.torch.wire_dtype(torch.float16):
        work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, async_op=True)
    return work.get_future().then(lambda _: tensor)


def gloo_takes_bfloat16(gloo):
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.bfloat16), group=gloo)
        return True
    except RuntimeError:
        return False


def bf16_compress_hook_cpu(process_group, bucket):
    """torch's bf16_compress_hook itself. torch 1.13's DDP refuses that hook by its name on a
    torch built without CUDA, although it is plain torch.distributed code that gloo runs."""
    return default_hooks.bf16_compress_hook(process_group, bucket)


def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(),
                               torch.nn.Linear(1024, 512), torch.nn.Tanh(),
                               torch.nn.Linear(512, 64))


def batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(32, 256, generator=g), torch.randn(32, 64, generator=g)


def grads_through(ddp, rank):
    x, y = batch(rank)
    ddp.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])


def exact_average(world):
    reference = model().double()
    total = None
    for r in range(world):
        x, y = batch(r)
        reference.zero_grad()
        torch.nn.functional.mse_loss(reference(x.double()), y.double()).backward()
        g = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        total = g if total is None else total + g
    return total / world


def relative_error(g, exact):
    return float((g.double() - exact).norm() / exact.norm())


def same_everywhere(tensor, group):
    digest = torch.tensor(list(hashlib.sha256(tensor.numpy().tobytes()).digest()[:8]),
                          dtype=torch.int64)
    everyone = [torch.zeros_like(digest) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, digest, group=group)
    return all(torch.equal(d, digest) for d in everyone)


def main():
    init()
    world = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    base = model()

    exact = exact_average(world)
    bf16_group = gloo if gloo_takes_bfloat16(gloo) else None  # None: the chorus group
    variants = {
        "bf16_wire": (None, chorus.torch.bf16_wire_hook),
        "fp16_wire": (None, fp16_wire_hook),
        "bf16_compress": (bf16_group, bf16_compress_hook_cpu),
        "fp16_compress": (gloo, default_hooks.fp16_compress_hook),
        "full": (None, None),
    }
    models = {}
    errors = {}
    for name, (group, hook) in variants.items():
        ddp = DistributedDataParallel(copy.deepcopy(base), process_group=group)
        if hook is not None:
            ddp.register_comm_hook(group, hook)
        models[name] = ddp
        grads = grads_through(ddp, RANK)
        errors[name] = relative_error(grads, exact)
        if name == "bf16_wire" and not same_everywhere(grads, gloo):
            sys.exit(f"rank {RANK}: bf16_wire_hook's gradients differ between ranks")
    e = errors
    if not e["full"] < 1e-5:
        sys.exit(f"rank {RANK}: full precision is off by {e['full']:.3g}")
    if not e["full"] < e["fp16_wire"] < e["bf16_wire"] < 2 ** -6:
        sys.exit(f"rank {RANK}: the wires' errors {e} are not those of 16-bit wires")
    for bits in ("bf16", "fp16"):
        if not e[f"{bits}_wire"] < e[f"{bits}_compress"]:
            sys.exit(f"rank {RANK}: the {bits} wire's error {e[bits + '_wire']:.3g} is not below "
                     f"{bits}_compress_hook's {e[bits + '_compress']:.3g}")
    wired = models["bf16_wire"]

    # Training with the hook keeps every rank's parameters identical (DDP relies on it).
    opt = torch.optim.SGD(wired.parameters(), lr=0.1, momentum=0.9)
    for step in range(5):
        grads_through(wired, (RANK + step) % world)
        opt.step()
    params = torch.cat([p.detach().reshape(-1) for p in wired.parameters()])
    if not same_everywhere(params, gloo):
        sys.exit(f"rank {RANK}: parameters differ between ranks after training with the hook")

    dist.barrier()  # nobody tears down while a peer still uses the gloo group
    where = "gloo" if bf16_group is not None else "chorus (gloo has no bfloat16)"
    print(f"OK wire: {world} ranks, {exact.numel()} gradients, relative error: "
          f"bf16_wire_hook {e['bf16_wire']:.3g} vs bf16_compress_hook on {where} "
          f"{e['bf16_compress']:.3g} ({e['bf16_compress'] / e['bf16_wire']:.2f}x); "
          f"fp16 wire {e['fp16_wire']:.3g} vs fp16_compress_hook on gloo "
          f"{e['fp16_compress']:.3g} ({e['fp16_compress'] / e['fp16_wire']:.2f}x); "
          f"full precision {e['full']:.3g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
