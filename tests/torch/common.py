# SPDX-License-Identifier: BSD-3-Clause
"""Shared by the rank scripts: init, version shims between torch 1.13 and 2.x, checks."""
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import chorus.torch  # noqa: F401  (registers the backend)


_rank = os.environ.get("RANK", "?")  # also valid after destroy_process_group()


def init(timeout_s=60):
    dist.init_process_group("chorus", init_method="env://",
                            timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def say(*parts):
    print(f"[rank {_rank}]", *parts, flush=True)


def fail(message):
    print(f"[rank {_rank}] FAIL: {message}", flush=True)
    sys.stdout.flush()
    os._exit(1)


def check(cond, message):
    if not cond:
        fail(message)


def all_gather_into_tensor(out, inp, group=None):
    f = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    return f(out, inp, group=group)


def reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM, group=None):
    f = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    return f(out, inp, op=op, group=group)


# ---------------------------------------------------------------- small models

class Mlp(nn.Module):
    def __init__(self, din=8, hidden=16, dout=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(din, hidden), nn.ReLU(), nn.Linear(hidden, dout))

    def forward(self, x):
        return self.net(x)


class Branchy(nn.Module):
    """Two heads, one per call: DDP needs find_unused_parameters or static_graph."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.head_a = nn.Linear(8, 4)
        self.head_b = nn.Linear(8, 4)

    def forward(self, x, use_b=False):
        h = torch.relu(self.trunk(x))
        return self.head_b(h) if use_b else self.head_a(h)
