# SPDX-License-Identifier: BSD-3-Clause
"""A small DDP job for scripts/test_pip.sh, as a torch user writes it: `import chorus.torch` and
init_process_group("chorus"), under any launcher (chorusrun, python -m chorus.run, torchrun).

    ddp_check.py VENV_PREFIX

Each rank checks that torch and chorus come from VENV_PREFIX (not the system's), trains a tiny
model for a few DDP steps on chorus, and checks that every rank ends with the same parameters
and that they equal a single-process run over the whole batch (DDP's gradient average is what
chorus computed). Prints "PIP_DDP_OK rank R/N ..." per rank.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import chorus
import chorus.torch  # noqa: F401 - registers the backend "chorus"

STEPS = 5
BATCH = 8  # per rank


def model_and_data(world):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).double()
    x = torch.randn(STEPS, world * BATCH, 16, dtype=torch.float64)
    y = torch.randn(STEPS, world * BATCH, 4, dtype=torch.float64)
    return model, x, y


def train(model, x, y, rank, n):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        part = slice(rank * BATCH, (rank + 1) * BATCH) if n else slice(None)
        loss = nn.functional.mse_loss(model(x[step, part]), y[step, part])
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main():
    prefix = os.path.realpath(sys.argv[1])
    for mod in (torch, chorus):
        where = os.path.realpath(os.path.dirname(mod.__file__))
        assert where.startswith(prefix + os.sep), f"{mod.__name__} from {where}, not {prefix}"
    assert os.path.realpath(sys.prefix) == prefix, f"python {sys.executable} is not the venv's"

    dist.init_process_group("chorus", init_method="env://",
                            timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "chorus"
    model, x, y = model_and_data(world)
    ddp = nn.parallel.DistributedDataParallel(model)
    params = train(ddp, x, y, rank, world)

    reference, _, _ = model_and_data(world)
    want = train(reference, x, y, 0, 0)
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    for r, g in enumerate(gathered):
        assert torch.equal(g, params), f"rank {r}'s parameters differ from rank {rank}'s"
    err = (params - want).abs().max().item()
    assert err < 1e-9, f"DDP on chorus is {err} away from one process over the whole batch"
    dist.barrier()
    dist.destroy_process_group()
    print(f"PIP_DDP_OK rank {rank}/{world}: {STEPS} DDP steps, parameters equal on every rank "
          f"and to one process (max diff {err:.1e}); torch {torch.__version__} and chorus "
          f"{chorus.__version__} from {prefix}", flush=True)


if __name__ == "__main__":
    main()
