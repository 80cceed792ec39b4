# SPDX-License-Identifier: BSD-3-Clause
"""The DDP scenarios of a torch tutorial, each trained twice in the same processes: once with
DistributedDataParallel on the chorus default group, once on a gloo group, from the same
initial weights and data. Every rank checks that both runs end with the same parameters and
buffers (within float rounding: the two backends may add in a different order).

usage: ddp_check.py CHECKPOINT_DIR"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from common import Branchy, Mlp, check, init, say

rank, n = init()
gloo = dist.new_group(backend="gloo")
checkpoint_dir = sys.argv[1]
TOLERANCE = 1e-5
results = {}


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x))))


def batches(count, seed, size=6):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 8, generator=g), torch.randn(size, 4, generator=g))
            for _ in range(count)]


def state(model):
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def compare(name, ours, theirs):
    worst = 0.0
    for k in ours:
        a, b = ours[k].double(), theirs[k].double()
        worst = max(worst, (a - b).abs().max().item() if a.numel() else 0.0)
    check(worst <= TOLERANCE, f"{name}: chorus and gloo differ by {worst:g} (> {TOLERANCE:g})")
    results[name] = worst


def train_both(name, make_model, step_fn, **ddp_kwargs):
    """Trains a chorus copy and a gloo copy with step_fn(model, opt); compares them."""
    torch.manual_seed(1234)  # same initial weights for both copies (and every rank, unless
    proto = make_model()      # make_model says otherwise)
    finals = []
    for group in (None, gloo):
        module = make_model()
        module.load_state_dict(proto.state_dict())
        model = DDP(module, process_group=group, **ddp_kwargs)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        step_fn(model, opt)
        finals.append(state(model))
    compare(name, *finals)
    return finals[0]


def plain_steps(model, opt, data=None):
    for x, y in data or batches(5, seed=100 + rank):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


# 1. A small model's training steps. Different data per rank: the gradients must be averaged.
#    Rank 0 starts from different weights than the others: DDP's constructor broadcasts them.
def mlp():
    m = Mlp()
    if rank == 0:
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.5)
    return m


final = train_both("mlp", mlp, plain_steps)

# 2. Checkpoint: saved on rank 0, barrier, loaded by every rank.
path = os.path.join(checkpoint_dir, "checkpoint.pt")
if rank == 0:
    torch.save(final, path)
dist.barrier()
loaded = torch.load(path, map_location="cpu")
for k, v in final.items():
    check(torch.equal(loaded[k], v), f"checkpoint: {k} differs after load on rank {rank}")
results["checkpoint"] = 0.0

# 3. join() with uneven inputs: rank r has 10 + r batches.
def uneven(model, opt):
    with model.join():
        plain_steps(model, opt, batches(10 + rank, seed=200 + rank))


train_both("join_uneven", Mlp, uneven)

# 4. find_unused_parameters=True: head_b only on odd steps.
def branchy_steps(model, opt):
    for i, (x, y) in enumerate(batches(6, seed=300 + rank)):
        opt.zero_grad()
        nn.functional.mse_loss(model(x, use_b=i % 2 == 1), y).backward()
        opt.step()


train_both("find_unused_parameters", Branchy, branchy_steps, find_unused_parameters=True)

# 5. BatchNorm: running statistics are buffers, broadcast from rank 0 at each forward.
train_both("batchnorm_buffers", WithBatchNorm, plain_steps)

# 6. DistributedSampler over a dataset that does not divide evenly, two epochs.
dataset = TensorDataset(torch.randn(37, 8, generator=torch.Generator().manual_seed(5)),
                        torch.randn(37, 4, generator=torch.Generator().manual_seed(6)))


def sampled(model, opt):
    sampler = DistributedSampler(dataset, num_replicas=n, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        plain_steps(model, opt, list(loader))


train_both("distributed_sampler", Mlp, sampled)

# Every rank ends with the same weights (the point of DDP).
flat = torch.cat([v.flatten().double() for v in final.values()])
gathered = [torch.zeros_like(flat) for _ in range(n)]
dist.all_gather(gathered, flat)
for j, other in enumerate(gathered):
    check(torch.equal(other, flat), f"rank {j}'s weights differ from rank {rank}'s")

dist.barrier()
say("OK ddp: " + ", ".join(f"{k} max|chorus-gloo|={v:.2g}" for k, v in results.items()))
dist.destroy_process_group()
