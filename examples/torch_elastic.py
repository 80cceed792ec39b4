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
Each step is printed exactly once, in order, whenever a rank dies, as in elastic_train.cpp: a
line counts once its record ("printed/<step>") is in the store; the survivors' agreement brings
the furthest step's line along and prints it if its record is missing (docs/elastic.md).

--grace-ms, --step-ms, --rejoin-wait-ms, --kill-at RANK:STEP, --stop-at RANK:STEP,
--kill-after-op RANK:STEP and --kill-after-us RANK:US as in examples/elastic_train.cpp.
"""
import argparse
import os
import signal
import sys
import threading
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
    parser.add_argument("--kill-after-op", type=rank_and_step, action="append", default=[])
    parser.add_argument("--kill-after-us", type=rank_and_step, action="append", default=[])
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
        print(f"torch_elastic: {e}", file=sys.stderr)  # a setup error: its message, status 1
        return 1
    me = elastic.launch_rank
    model = make_model()
    optimizer = make_optimizer(model)
    completed = 0
    # The line of step `completed`: its loss and the world that computed it.
    line = {"loss": 0.0, "world": 0}

    def step_line():
        return f"step {completed} world {line['world']} loss {line['loss']:.6f}"

    # Held from a line's write to its record's request: --kill-after-us does not kill in
    # between, the one window no order of the two closes (docs/elastic.md, "Printed steps").
    print_window = threading.Lock()

    def print_and_record(key, text):
        """Prints `text`, then records it as printed: a line counts once its record is in the
        store."""
        with print_window:
            print(text, flush=True)
            elastic.store.add(f"printed/{key}", 1)

    def print_unless_recorded(key, text):
        """The same, unless a rank 0 that died afterwards printed it already."""
        if elastic.store.add(f"printed/{key}", 0) == 0:
            print_and_record(key, text)

    def kill_outside_the_print_window():
        with print_window:
            os.kill(os.getpid(), signal.SIGKILL)

    def arm_kill_timer():
        for rank, us in args.kill_after_us:
            if rank == me:
                timer = threading.Timer(us / 1e6, kill_outside_the_print_window)
                timer.daemon = True
                timer.start()

    def momentum_buffers():
        buffers = []
        for p in model.parameters():
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:  # a joiner, before its first step
                state["momentum_buffer"] = torch.zeros_like(p)
            buffers.append(state["momentum_buffer"])
        return buffers

    def share_state(source, with_line=False):
        """Everyone takes `source`'s parameters, momentum and step (and that step's line)."""
        nonlocal completed
        step = torch.tensor([completed], dtype=torch.int64)
        dist.broadcast(step, source)
        completed = int(step.item())
        if with_line:
            got = torch.tensor([line["loss"], float(line["world"])], dtype=torch.float64)
            dist.broadcast(got, source)
            line["loss"], line["world"] = got[0].item(), int(got[1].item())
        with torch.no_grad():
            for t in list(model.parameters()) + momentum_buffers():
                dist.broadcast(t, source)

    def recover():
        """Shrinks until the survivors agree on the state: the furthest step any of them
        completed, from the lowest rank that has it (one survivor's allreduce may have finished
        the failed step before the failure reached the others), with that step's line, printed
        now unless its record is there (its printer may have died before printing it)."""
        while True:
            elastic.shrink(grace=args.grace_ms / 1000)
            try:
                furthest = torch.tensor([completed], dtype=torch.int64)
                dist.all_reduce(furthest, op=dist.ReduceOp.MAX)
                source = torch.tensor([elastic.rank if completed == furthest.item()
                                       else elastic.world_size], dtype=torch.int64)
                dist.all_reduce(source, op=dist.ReduceOp.MIN)
                share_state(int(source.item()), with_line=True)
                if elastic.rank == 0 and completed > 0:
                    print_unless_recorded(completed, step_line())
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
    changed = False  # the group changed since the last completed step
    try:
        while True:
            if completed == args.steps:
                # The end: rank 0 prints the result, then every rank confirms it is still there,
                # so that a rank 0 that died before its last lines leaves them to the survivors.
                if elastic.rank == 0:
                    elastic.stop_admitting("the job finished")
                    print_unless_recorded("final", f"final {model.weight.sum().item():.12g}")
                try:
                    dist.all_reduce(torch.zeros(1))
                    break
                except RuntimeError as e:
                    print(f"torch_elastic: rank {me}: the last barrier failed: {e}",
                          file=sys.stderr)
                    recover()
                    ddp = DistributedDataParallel(model)
                    continue
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
                shrunk = changed = True
                continue
            if not elastic.joined and (me, step) in args.kill_after_op:
                os.kill(os.getpid(), signal.SIGKILL)  # after the allreduce, before the line
            optimizer.step()
            completed = step
            line["loss"], line["world"] = squared.item() / BATCH, elastic.world_size
            if step == 1 and not elastic.joined:
                arm_kill_timer()
            if elastic.rank == 0:
                if changed:  # the survivors may have computed again a step the dead rank 0 printed
                    print_unless_recorded(step, step_line())
                else:
                    print_and_record(step, step_line())
            changed = False
            # The step boundary: let in whoever waits to join (after a shrink, wait a while).
            wait = args.rejoin_wait_ms / 1000 if shrunk else 0.0
            shrunk = False
            try:
                if elastic.grow(wait=wait):
                    share_state(0)
                    ddp = DistributedDataParallel(model)
                    changed = True
            except RuntimeError as e:
                print(f"torch_elastic: rank {me}: growing after step {step} failed: {e}",
                      file=sys.stderr)
    except RuntimeError as e:
        print(f"torch_elastic: rank {me} gives up: {e}", file=sys.stderr)
        return 3 if "fenced out" in str(e) else 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
