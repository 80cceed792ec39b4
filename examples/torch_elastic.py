# SPDX-License-Identifier: BSD-3-Clause
"""DDP training that keeps going when ranks die, and takes replacements back: run under

    chorusrun --elastic --standalone -n 4 [--max-restarts K] python3 torch_elastic.py --steps 60

and kill a rank. chorus.torch.ElasticGroup holds torch's default group: after DDP's allreduce
fails, the survivors shrink it, agree on the state and go on in the smaller world; with
--max-restarts, chorusrun starts a replacement that joins, and the members let it in at their
next step boundary (grow) and send it the model and the optimizer's state. The lowest rank
prints one line per step, "step <i> world <w> loss <l>", and at the end "final <sum of the
parameters>", which equals a single process's training (reference()): each step's global batch
is fixed and split over the ranks, so the averaged gradient does not depend on the world size.

--grace-ms, --step-ms, --rejoin-wait-ms, --kill-at RANK:STEP and --stop-at RANK:STEP as in
examples/elastic_train.cpp.
"""
import argparse
import os
import signal
import sys
import time

import torch

PARAMS = 16
BATCH = 48  # samples per step, over all ranks
LEARNING_RATE = 0.05
MOMENTUM = 0.9


def batch(step):
    """Step `step`'s global batch: the same whatever the world size."""
    g = torch.Generator().manual_seed(step)
    x = torch.rand(BATCH, PARAMS, generator=g, dtype=torch.float64) * 2 - 1
    true_w = torch.arange(1, PARAMS + 1, dtype=torch.float64) / PARAMS
    y = x @ true_w + 0.01 * (torch.rand(BATCH, generator=g, dtype=torch.float64) * 2 - 1)
    return x, y


def make_model():
    model = torch.nn.Linear(PARAMS, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    return model


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)


def local_loss(model, step, rank, world):
    """This rank's share of the step's loss, scaled so that DDP's average over the ranks is the
    mean over the global batch; and its summed squared error, for the printed loss."""
    x, y = batch(step)
    x, y = x[rank::world], y[rank::world]
    squared = ((model(x).squeeze(1) - y) ** 2).sum()
    return squared * world / BATCH, squared.detach()


def reference(steps):
    """Single-process training for `steps` steps: the sum of the parameters."""
    model = make_model()
    optimizer = make_optimizer(model)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        local_loss(model, step, 0, 1)[0].backward()
        optimizer.step()
    return model.weight.sum().item()


def ms_since_process_start():
    """Milliseconds since this process was started (Python and torch's imports included)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    start = start_ticks / os.sysconf("SC_CLK_TCK")
    return (time.clock_gettime(time.CLOCK_BOOTTIME) - start) * 1000


def rank_and_step(text):
    rank, step = text.split(":")
    return int(rank), int(step)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--grace-ms", type=int, default=2000)
    parser.add_argument("--step-ms", type=int, default=0)
    parser.add_argument("--rejoin-wait-ms", type=int, default=0)
    parser.add_argument("--kill-at", type=rank_and_step, action="append", default=[])
    parser.add_argument("--stop-at", type=rank_and_step, action="append", default=[])
    args = parser.parse_args()

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import chorus.torch

    try:
        elastic = chorus.torch.ElasticGroup()
    except RuntimeError as e:
        if os.environ.get("CHORUS_ELASTIC_JOIN") == "1" and "stopped admitting" in str(e):
            print(f"torch_elastic: nothing to join: {e}", file=sys.stderr)
            return 0  # a replacement that came after the job finished
        raise
    me = elastic.launch_rank
    model = make_model()
    optimizer = make_optimizer(model)
    completed = 0

    def momentum_buffers():
        buffers = []
        for p in model.parameters():
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:  # a joiner, before its first step
                state["momentum_buffer"] = torch.zeros_like(p)
            buffers.append(state["momentum_buffer"])
        return buffers

    def share_state(source):
        """Everyone takes `source`'s parameters, momentum and step."""
        nonlocal completed
        step = torch.tensor([completed], dtype=torch.int64)
        dist.broadcast(step, source)
        completed = int(step.item())
        with torch.no_grad():
            for t in list(model.parameters()) + momentum_buffers():
                dist.broadcast(t, source)

    def recover():
        """Shrinks until the survivors agree on the state: the furthest step any of them
        completed, from the lowest rank that has it (one survivor's allreduce may have finished
        the failed step before the failure reached the others)."""
        while True:
            elastic.shrink(grace=args.grace_ms / 1000)
            try:
                furthest = torch.tensor([completed], dtype=torch.int64)
                dist.all_reduce(furthest, op=dist.ReduceOp.MAX)
                source = torch.tensor([elastic.rank if completed == furthest.item()
                                       else elastic.world_size], dtype=torch.int64)
                dist.all_reduce(source, op=dist.ReduceOp.MIN)
                share_state(int(source.item()))
                return
            except RuntimeError as e:
                print(f"torch_elastic: recovery failed ({e}); shrinking again", file=sys.stderr)

    if elastic.joined:
        share_state(0)
        print(f"torch_elastic: rank {me} joined as rank {elastic.rank}/{elastic.world_size} "
              f"after step {completed}, {ms_since_process_start():.0f} ms after its process "
              "started", file=sys.stderr, flush=True)
    ddp = DistributedDataParallel(model)
    shrunk = False
    try:
        while completed < args.steps:
            step = completed + 1
            if not elastic.joined and (me, step) in args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if not elastic.joined and (me, step) in args.stop_at:
                print(f"stopping pid {os.getpid()}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
            try:
                optimizer.zero_grad()
                loss, squared = local_loss(ddp, step, elastic.rank, elastic.world_size)
                loss.backward()  # DDP's allreduce: raises if a rank is gone
                dist.all_reduce(squared)
            except RuntimeError as e:
                print(f"torch_elastic: rank {me}: step {step} failed: {e}", file=sys.stderr)
                recover()
                ddp = DistributedDataParallel(model)
                shrunk = True
                continue
            optimizer.step()
            completed = step
            if elastic.rank == 0 and elastic.store.add(f"printed/{step}", 1) == 1:
                print(f"step {step} world {elastic.world_size} loss {squared.item() / BATCH:.6f}",
                      flush=True)
            # The step boundary: let in whoever waits to join (after a shrink, wait a while).
            wait = args.rejoin_wait_ms / 1000 if shrunk else 0.0
            shrunk = False
            try:
                if elastic.grow(wait=wait):
                    share_state(0)
                    ddp = DistributedDataParallel(model)
            except RuntimeError as e:
                print(f"torch_elastic: rank {me}: growing after step {step} failed: {e}",
                      file=sys.stderr)
    except RuntimeError as e:
        print(f"torch_elastic: rank {me} gives up: {e}", file=sys.stderr)
        return 3 if "fenced out" in str(e) else 1
    if elastic.rank == 0:
        elastic.stop_admitting("the job finished")
        if elastic.store.add("printed/final", 1) == 1:
            print(f"final {model.weight.sum().item():.12g}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
