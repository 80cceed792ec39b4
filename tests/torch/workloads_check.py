# SPDX-License-Identifier: BSD-3-Clause
"""The workloads people run on torch.distributed, each run twice in the same processes: on a gloo
group and on the chorus default group (the same code, the group passed in), then compared:
chorus must equal gloo within REL (relative to the tensor's largest value), and both must
equal a reference computed in one process from every rank's data (each rank can rebuild all of
it). Where gloo itself is wrong on this torch for a known reason (GLOO_AVG below: its ops with
ReduceOp.AVG), the results that depend on it are held to the reference alone and the line says
so.

usage: workloads_check.py TMPDIR (subset | all | WORKLOAD...)

Prints, on every rank, "WORKLOAD PASS name ..." or "WORKLOAD SKIP name: why" (an API this
torch lacks) for each workload, then "OK workloads"; rank 0 first prints "WORKLOAD PLAN" with
the names, so the driver (run_torch_tests.py) can tell a missing line from a pass."""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from common import Branchy, Mlp, check, fail, init, reduce_scatter_tensor, say

REL = 1e-5
TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


class Skip(Exception):
    """A workload this torch cannot run, and why (the same on every rank)."""


def need(cond, why):
    if not cond:
        raise Skip(why)


# ---------------------------------------------------------------- comparing

def rel_diff(ours, theirs):
    """Largest |ours - theirs| over every tensor, relative to that tensor's largest |theirs|."""
    check(ours and sorted(ours) == sorted(theirs),
          f"different results: {sorted(ours)} vs {sorted(theirs)}")
    worst = 0.0
    for k, b in theirs.items():
        a = ours[k]
        check(a.shape == b.shape, f"{k}: shape {list(a.shape)} vs {list(b.shape)}")
        if a.numel() == 0:
            continue
        a, b = a.double(), b.double()
        scale = b.abs().max().item()
        diff = (a - b).abs().max().item()
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def clean(name):
    """A parameter's name without the wrappers' prefixes (DDP, FSDP1)."""
    for prefix in ("module.", "_fsdp_wrapped_module.", "_flat_param"):
        name = name.replace(prefix, "")
    return name


def plain_state(module):
    return {clean(k): v.detach().clone() for k, v in module.state_dict().items()}


def gloo_avg_faults(gloo, n, rank):
    """{"all_reduce": fault, "reduce_scatter": fault}: None where gloo's op with ReduceOp.AVG
    averages, else what it does instead. torch 2.6's gloo reduce_scatter_tensor returns the
    sum, so FSDP2 (which reduce-scatters gradients with AVG) gets gradients n times too large
    on gloo."""
    if not hasattr(dist.ReduceOp, "AVG"):
        return {op: "this torch has no ReduceOp.AVG" for op in ("all_reduce", "reduce_scatter")}
    faults = {}
    want = (n + 1) / 2
    for op in ("all_reduce", "reduce_scatter"):
        out = torch.full((1,), float(rank + 1)) if op == "all_reduce" else torch.zeros(1)
        try:
            if op == "all_reduce":
                dist.all_reduce(out, op=dist.ReduceOp.AVG, group=gloo)
            else:
                reduce_scatter_tensor(out, torch.full((n,), float(rank + 1)),
                                      op=dist.ReduceOp.AVG, group=gloo)
        except Exception as e:  # noqa: BLE001 - refused before any rank sent anything
            faults[op] = f"gloo refuses {op}(op=AVG) ({str(e).splitlines()[0][:80]})"
            continue
        faults[op] = (None if out.item() == want else
                      f"gloo's {op}(op=AVG) returns {out.item():g}, not the average {want:g}")
    return faults


# ---------------------------------------------------------------- models and data

def deep():
    """Eight 256x256 layers (2 MB of parameters): DDP's buckets after the first step are 1 MB
    (torch's first bucket), then bucket_cap_mb each."""
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(256, 256), nn.Tanh())])


def wide():
    """Four 128x128 layers (0.26 MB): one DDP bucket. PowerSGD issues collectives from its
    futures' callbacks; with two buckets in flight, the order in which their callbacks issue
    them may differ between ranks (gloo then fails on a message of the wrong size)."""
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(128, 128), nn.Tanh())])


def stack():
    """Three Linear layers, each sharded on its own by FSDP (nested wrapping)."""
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def seeded(make, seed):
    torch.manual_seed(seed)
    return make()


def batch(seed, step, k, r, din=8, dout=4, size=4):
    """Rank r's k-th micro-batch of a step: any rank can make any rank's batch."""
    g = torch.Generator().manual_seed((((seed * 64 + step) * 8 + k) * 16) + r)
    return torch.randn(size, din, generator=g), torch.randn(size, dout, generator=g), {}


def schedule(seed, steps, micro=1, **dims):
    """steps functions r -> [(x, y, forward kwargs), ...]: what rank r trains on at that step
    (an empty list: r has no more data)."""
    return [lambda r, s=s: [batch(seed, s, k, r, **dims) for k in range(micro)]
            for s in range(steps)]


def mse(out, y):
    return nn.functional.mse_loss(out, y)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


def train(model, opt, steps, rank, no_sync=False):
    """The steps as rank `rank` runs them: micro-batches accumulated under no_sync (DDP) but
    the last, then one optimizer step; stops where the rank's data ends."""
    for step in steps:
        micro = step(rank)
        if not micro:
            break
        opt.zero_grad()
        for i, (x, y, kw) in enumerate(micro):
            quiet = no_sync and i < len(micro) - 1
            with model.no_sync() if quiet else contextlib.nullcontext():
                mse(model(x, **kw), y).backward()
        opt.step()


def reference_training(make, steps, n, optimizer=sgd):
    """What data-parallel training computes, in one process: each step's gradient is the sum
    of every rank's micro-batch gradients over the world size (DDP averages; a rank out of
    data contributes nothing, as DDP's join shadows it with zeros)."""
    model = make()
    opt = optimizer(model.parameters())
    for step in steps:
        micro = [mb for r in range(n) for mb in step(r)]
        if not micro:
            break
        opt.zero_grad()
        (sum(mse(model(x, **kw), y) for x, y, kw in micro) / n).backward()
        opt.step()
    return plain_state(model)


# ---------------------------------------------------------------- workloads
# Each: (run(ctx, group, tag) -> {name: tensor}, reference(ctx) -> {name: tensor}). run is
# called with the gloo group (tag "gloo"), then with chorus's default group (tag "chorus").

class Ctx:
    def __init__(self, rank, n, tmpdir):
        self.rank, self.n, self.tmpdir = rank, n, tmpdir


def ddp_workload(make, steps, no_sync=False, optimizer=sgd, join=False, min_buckets=1,
                 hook=None, **ddp_kwargs):
    """DDP training; hook(group) -> (state, comm hook) registers a communication hook (its
    compressed gradients have no exact reference: chorus is compared with gloo alone)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run(ctx, group, tag):
        model = DDP(make(ctx.rank), process_group=group, **ddp_kwargs)
        if hook is not None:
            model.register_comm_hook(*hook(group))
        opt = optimizer(model.parameters())
        with model.join() if join else contextlib.nullcontext():
            train(model, opt, steps, ctx.rank, no_sync=no_sync)
        # the buckets DDP rebuilt after the first step, in the order gradients came
        sizes = model._get_ddp_logging_data().get("rebuilt_bucket_sizes")
        buckets = len(str(sizes).split(",")) if sizes else None
        check(buckets is None or buckets >= min_buckets,
              f"DDP on {tag} made {buckets} bucket(s) ({sizes} bytes), not {min_buckets}+")
        return plain_state(model.module)

    def reference(ctx):
        if hook is not None:
            return None
        # DDP's constructor broadcasts rank 0's weights.
        return reference_training(lambda: make(0), steps, ctx.n, optimizer)

    return run, reference


def fp16_hook(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return group, default_hooks.fp16_compress_hook


def powersgd_hook(group):
    """PowerSGD from the third step (rank-2 approximations of the 128x128 gradients, error
    feedback and warm start on), plain allreduce before."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                   start_powerSGD_iter=2, random_seed=7)
    return state, powersgd.powerSGD_hook


def perturbed_mlp(r):
    """Rank 0 starts from other weights than the rest: DDP's constructor must broadcast them."""
    m = seeded(Mlp, 11)
    if r == 0:
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.5)
    return m


def uneven_steps(seed):
    """Rank r has 3 + 2r batches: DDP's join() shadows the ranks that run out."""
    return [lambda r, s=s: [batch(seed, s, 0, r)] if s < 3 + 2 * r else [] for s in range(9)]


def alternating_steps(seed, steps):
    """head_b on odd steps (the same on every rank), head_a on even ones."""
    return [lambda r, s=s: [(*batch(seed, s, 0, r)[:2], {"use_b": s % 2 == 1})]
            for s in range(steps)]


def head_a_steps(seed, steps):
    return [lambda r, s=s: [(*batch(seed, s, 0, r)[:2], {"use_b": False})] for s in range(steps)]


def zero_checkpoint():
    """ZeroRedundancyOptimizer (Adam, state sharded over the ranks) under DDP: 3 steps,
    consolidate_state_dict(to=0), rank 0 saves model and optimizer, every rank loads them into
    a new model and optimizer and trains 3 more steps. The loaded run must equal the same run
    uninterrupted, and both the reference."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps = schedule(4, 6)

    def fresh(group, state=None):
        module = seeded(Mlp, 12)
        if state is not None:
            module.load_state_dict(state)
        model = DDP(module, process_group=group)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        return model, opt

    def run(ctx, group, tag):
        model, opt = fresh(group)
        train(model, opt, steps[:3], ctx.rank)
        opt.consolidate_state_dict(to=0)
        path = os.path.join(ctx.tmpdir, f"zero_{tag}.pt")
        if ctx.rank == 0:
            torch.save({"model": model.module.state_dict(), "optim": opt.state_dict()}, path)
        dist.barrier(group=group)
        saved = torch.load(path)
        moments = {f"optim.{i}.{key}": s[key].clone()
                   for i, s in saved["optim"]["state"].items() for key in ("exp_avg", "exp_avg_sq")}
        loaded, loaded_opt = fresh(group, saved["model"])
        loaded_opt.load_state_dict(saved["optim"])  # drops (sets None) the other ranks' state
        train(loaded, loaded_opt, steps[3:], ctx.rank)
        train(model, opt, steps[3:], ctx.rank)
        out = plain_state(loaded.module)
        drift = rel_diff(out, plain_state(model.module))
        check(drift <= REL, f"zero_checkpoint on {tag}: the reloaded run differs from the "
              f"uninterrupted one by {drift:g}")
        out.update(moments)
        return out

    def reference(ctx):
        model = seeded(Mlp, 12)
        opt = adam(model.parameters())
        out = reference_training(lambda: model, steps[:3], ctx.n, lambda _: opt)
        for i, p in enumerate(model.parameters()):
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"optim.{i}.{key}"] = opt.state[p][key].clone()
        out.update(reference_training(lambda: model, steps[3:], ctx.n, lambda _: opt))
        return out

    return run, reference


def fsdp1(strategy):
    """FullyShardedDataParallel (torch's first FSDP), each Linear wrapped on its own and the
    whole model around them, `strategy` sharding; the full parameters after 4 SGD steps."""
    steps = schedule(5, 4)

    def run(ctx, group, tag):
        need(TORCH >= (2, 0), "torch 1.13's FSDP package does not import on Python 3.11 (a "
             "mutable dataclass default in torch.distributed._shard)")
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

        kw = dict(process_group=group, sharding_strategy=getattr(ShardingStrategy, strategy),
                  device_id=torch.device("cpu"))
        model = seeded(stack, 13)
        for i in (0, 2, 4):
            model[i] = FSDP(model[i], **kw)
        model = FSDP(model, **kw)
        opt = sgd(model.parameters())
        train(model, opt, steps, ctx.rank)
        with FSDP.summon_full_params(model):
            return {clean(k): v.detach().clone() for k, v in model.named_parameters()}

    def reference(ctx):
        return reference_training(lambda: seeded(stack, 13), steps, ctx.n)

    return run, reference


def mesh_of(group):
    """A 1-D DeviceMesh on `group` (chorus's default group or the gloo one)."""
    need(TORCH >= (2, 4), "DeviceMesh.from_group (torch 2.4+) is needed to put a mesh on a "
         "given group")
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:
        raise Skip("this torch has no torch.distributed.device_mesh") from None
    need(hasattr(DeviceMesh, "from_group"), "DeviceMesh.from_group (torch 2.4+) is needed to "
         "put a mesh on a given group")
    return DeviceMesh.from_group(group, "cpu")


def dtensor_api():
    need(TORCH >= (2, 4), "DTensor on a given group needs DeviceMesh.from_group (torch 2.4+)")
    try:
        from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                              distribute_tensor)
    except ImportError:
        try:
            from torch.distributed._tensor import (DTensor, Replicate, Shard,
                                                   distribute_tensor)
            from torch.distributed._tensor.placement_types import _Partial as Partial
        except ImportError:
            raise Skip("this torch has no DTensor") from None
    return DTensor, Partial, Replicate, Shard, distribute_tensor


def fully_shard_api():
    need(TORCH >= (2, 4), "FSDP2 (fully_shard) is torch 2.4+")
    # FSDP2 records and waits for events on its streams; on CPU they are torch.cpu.Stream,
    # which on torch 2.6 has neither record_event nor wait_event: FSDP2 fails there on CPU
    # tensors on every backend (and with those two stood in, its first backward fails on a
    # tensor modified in place).
    need(hasattr(torch.cpu.Stream, "record_event"), "this torch's FSDP2 cannot run on CPU "
         "tensors on any backend (torch.cpu.Stream has no record_event)")
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            raise Skip("this torch has no FSDP2 fully_shard (torch 2.4+)") from None
    return fully_shard


def fsdp2():
    """FSDP2: fully_shard on each Linear and on the model; parameters are DTensors sharded on
    dim 0, gradients reduce-scattered (with AVG: see GLOO_AVG). The full parameters after 4
    SGD steps."""
    steps = schedule(6, 4)

    def run(ctx, group, tag):
        fully_shard = fully_shard_api()
        mesh = mesh_of(group)
        model = seeded(stack, 14)
        for i in (0, 2, 4):
            fully_shard(model[i], mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = sgd(model.parameters())
        train(model, opt, steps, ctx.rank)
        return {k: v.full_tensor().detach().clone() for k, v in model.named_parameters()}

    def reference(ctx):
        return reference_training(lambda: seeded(stack, 14), steps, ctx.n)

    return run, reference


def dtensor_redistribute():
    """DTensor placements changed every way a mesh dimension allows: Shard(0) -> Replicate
    (all-gather), Shard(0) -> Shard(1) (all-to-all), Replicate -> Shard(1) (local), Partial ->
    Replicate (all-reduce), Partial -> Shard(0) (reduce-scatter); uneven shards (7 rows)."""
    def full():
        return torch.randn(7, 6, generator=torch.Generator().manual_seed(21))

    def part(r):
        return torch.randint(-4, 5, (7, 6), generator=torch.Generator().manual_seed(30 + r)).float()

    def run(ctx, group, tag):
        DTensor, Partial, Replicate, Shard, distribute_tensor = dtensor_api()
        mesh = mesh_of(group)
        sharded = distribute_tensor(full(), mesh, [Shard(0)])
        out = {
            "shard0_to_replicate": sharded.redistribute(mesh, [Replicate()]).to_local(),
            "shard0_to_shard1": sharded.redistribute(mesh, [Shard(1)]).full_tensor(),
            "replicate_to_shard1": distribute_tensor(full(), mesh, [Replicate()])
            .redistribute(mesh, [Shard(1)]).full_tensor(),
        }
        partial = DTensor.from_local(part(ctx.rank), mesh, [Partial()])
        out["partial_to_replicate"] = partial.redistribute(mesh, [Replicate()]).to_local()
        out["partial_to_shard0"] = partial.redistribute(mesh, [Shard(0)]).full_tensor()
        return {k: v.detach().clone() for k, v in out.items()}

    def reference(ctx):
        total = sum(part(r) for r in range(ctx.n))
        return {"shard0_to_replicate": full(), "shard0_to_shard1": full(),
                "replicate_to_shard1": full(), "partial_to_replicate": total,
                "partial_to_shard0": total}

    return run, reference


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(8, 32)
        self.w2 = nn.Linear(32, 8)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def tensor_parallel():
    """Megatron-style tensor parallel: w1 column-parallel, w2 row-parallel (the forward's
    all-reduce, the backward's), the same input on every rank; outputs and full weights
    after 3 SGD steps, against the same model trained in one process."""
    def data(s):
        g = torch.Generator().manual_seed(40 + s)
        return torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)

    def steps(model):
        opt = sgd(model.parameters())
        outs = []
        for s in range(3):
            x, y = data(s)
            opt.zero_grad()
            out = model(x)
            mse(out, y).backward()
            opt.step()
            outs.append(out.detach().clone())
        return torch.stack(outs)

    def run(ctx, group, tag):
        need(TORCH >= (2, 4), "tensor parallel on a given group needs DeviceMesh.from_group "
             "(torch 2.4+)")
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = mesh_of(group)
        model = seeded(TwoLayer, 15)
        parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        outputs = steps(model)
        out = {k: v.full_tensor().detach().clone() for k, v in model.named_parameters()}
        out["outputs"] = outputs
        return out

    def reference(ctx):
        model = seeded(TwoLayer, 15)
        outputs = steps(model)
        out = plain_state(model)
        out["outputs"] = outputs
        return out

    return run, reference


def dcp_sharded():
    """torch.distributed.checkpoint: a state of DTensors (sharded unevenly, replicated) and a
    plain tensor saved by every rank, then loaded into other placements (resharding)."""
    def full():
        g = torch.Generator().manual_seed(50)
        return {"w": torch.randn(7, 6, generator=g), "b": torch.randn(5, generator=g),
                "emb": torch.randn(9, 4, generator=g), "step": torch.tensor(3)}

    def run(ctx, group, tag):
        DTensor, Partial, Replicate, Shard, distribute_tensor = dtensor_api()
        mesh = mesh_of(group)
        import torch.distributed.checkpoint as dcp
        need(hasattr(dcp, "save") and hasattr(dcp, "load"), "this torch's DCP has no save/load")
        src = full()
        path = os.path.join(ctx.tmpdir, f"dcp_{tag}")
        state = {"w": distribute_tensor(src["w"], mesh, [Shard(0)]),
                 "b": distribute_tensor(src["b"], mesh, [Shard(0)]),
                 "emb": distribute_tensor(src["emb"], mesh, [Replicate()]), "step": src["step"]}
        dcp.save(state, checkpoint_id=path, process_group=group)
        target = {"w": distribute_tensor(torch.zeros(7, 6), mesh, [Shard(1)]),
                  "b": distribute_tensor(torch.zeros(5), mesh, [Replicate()]),
                  "emb": distribute_tensor(torch.zeros(9, 4), mesh, [Shard(0)]),
                  "step": torch.tensor(0)}
        dcp.load(target, checkpoint_id=path, process_group=group)
        return {k: (v.full_tensor() if isinstance(v, DTensor) else v).clone()
                for k, v in target.items()}

    def reference(ctx):
        return full()

    return run, reference


def functional_collectives():
    """torch.distributed._functional_collectives (what torch.compile and DTensor call): each
    op on small integers, so every result is exact."""
    def value(r, n):
        g = torch.Generator().manual_seed(60 + r)
        return torch.randint(-5, 6, (2 * n, 3), generator=g).float()

    def run(ctx, group, tag):
        try:
            import torch.distributed._functional_collectives as funcol
        except ImportError:
            raise Skip("this torch has no torch.distributed._functional_collectives") from None

        def done(t):
            return (t.wait() if hasattr(t, "wait") else t).clone()

        x = value(ctx.rank, ctx.n)
        out = {
            "all_reduce_sum": done(funcol.all_reduce(x, "sum", group)),
            "all_reduce_max": done(funcol.all_reduce(x, "max", group)),
            "all_gather": done(funcol.all_gather_tensor(x, 0, group)),
            "reduce_scatter_sum": done(funcol.reduce_scatter_tensor(x, "sum", 0, group)),
            "all_to_all": done(funcol.all_to_all_single(x, None, None, group)),
            "broadcast": done(funcol.broadcast(x, ctx.n - 1, group)),
        }
        if tag == "chorus" or GLOO_AVG["all_reduce"] is None:
            out["all_reduce_avg"] = done(funcol.all_reduce(x, "avg", group))
        if tag == "chorus" or GLOO_AVG["reduce_scatter"] is None:
            out["reduce_scatter_avg"] = done(funcol.reduce_scatter_tensor(x, "avg", 0, group))
        return out

    def reference(ctx):
        xs = [value(r, ctx.n) for r in range(ctx.n)]
        total = sum(xs)
        rows = 2  # each rank's share of dim 0
        mine = slice(ctx.rank * rows, (ctx.rank + 1) * rows)
        return {"all_reduce_sum": total, "all_reduce_max": torch.stack(xs).max(0).values,
                "all_gather": torch.cat(xs), "reduce_scatter_sum": total[mine],
                "all_to_all": torch.cat([x[mine] for x in xs]), "broadcast": xs[-1],
                "all_reduce_avg": total / ctx.n, "reduce_scatter_avg": total[mine] / ctx.n}

    return run, reference


WORKLOADS = {
    "ddp_plain": ddp_workload(perturbed_mlp, schedule(1, 4)),
    "ddp_no_sync": ddp_workload(lambda r: seeded(Mlp, 2), schedule(2, 3, micro=3),
                                no_sync=True),
    "ddp_find_unused": ddp_workload(lambda r: seeded(Branchy, 3), alternating_steps(3, 4),
                                    find_unused_parameters=True),
    # head_b is never used: static_graph learns that once, in the first iteration
    "ddp_static_graph": ddp_workload(lambda r: seeded(Branchy, 4), head_a_steps(4, 4),
                                     static_graph=True),
    "ddp_join_uneven": ddp_workload(lambda r: seeded(Mlp, 5), uneven_steps(5), join=True),
    "ddp_many_buckets": ddp_workload(lambda r: seeded(deep, 6), schedule(6, 3, din=256, dout=256),
                                     bucket_cap_mb=0.15, min_buckets=4),
    # communication hooks (torch's own): compressed gradients, compared with gloo's
    "ddp_fp16_hook": ddp_workload(lambda r: seeded(Mlp, 8), schedule(8, 4), hook=fp16_hook),
    "ddp_powersgd": ddp_workload(lambda r: seeded(wide, 9), schedule(9, 4, din=128, dout=128),
                                 hook=powersgd_hook),
    "zero_checkpoint": zero_checkpoint(),
    "fsdp1_full_shard": fsdp1("FULL_SHARD"),
    "fsdp1_shard_grad_op": fsdp1("SHARD_GRAD_OP"),
    "fsdp1_no_shard": fsdp1("NO_SHARD"),
    "fsdp2": fsdp2(),
    "dtensor_redistribute": dtensor_redistribute(),
    "tensor_parallel": tensor_parallel(),
    "dcp_sharded": dcp_sharded(),
    "functional_collectives": functional_collectives(),
}
# Tolerances other than REL between chorus and gloo. fp16_compress_hook rounds each gradient
# to float16 and the backend sums them in float16, in the order its algorithm takes (gloo's
# ring and chorus's differ from 3 ranks on): equal only within float16 rounding (2^-10).
VS_GLOO = {"ddp_fp16_hook": 1e-3}
# Workloads whose every result goes through an AVG reduction: not compared with gloo where
# GLOO_AVG names a fault (FSDP2 reduce-scatters its gradients with AVG). functional_collectives
# leaves its AVG ops out of gloo's run instead, and compares the rest.
AVG_THROUGHOUT = ("fsdp2",)
# One of each kind, for every `make test` torch leg (at 2 ranks, a few seconds of work beside
# starting torch); "all" is for the torch matrix.
SUBSET = ("ddp_no_sync", "ddp_many_buckets", "ddp_powersgd", "zero_checkpoint",
          "fsdp1_full_shard", "fsdp2", "tensor_parallel", "dcp_sharded", "functional_collectives")
GLOO_AVG = {}  # gloo_avg_faults()


def run_workload(ctx, gloo, name):
    """Runs `name` on gloo, then on chorus; checks; prints its line."""
    run, reference = WORKLOADS[name]
    start = time.monotonic()
    try:
        theirs = run(ctx, gloo, "gloo")
    except Skip as e:
        say(f"WORKLOAD SKIP {name}: {e}")
        return
    middle = time.monotonic()
    ours = run(ctx, dist.group.WORLD, "chorus")
    end = time.monotonic()
    want = reference(ctx)
    vs_ref = float("nan") if want is None else rel_diff(ours, want)
    check(not vs_ref > REL, f"{name}: chorus differs from the reference by {vs_ref:g} (> {REL:g})")
    if name in AVG_THROUGHOUT and GLOO_AVG["reduce_scatter"] is not None:
        # gloo's whole result is wrong on this torch: chorus is held to the reference alone
        gloo_ref = rel_diff(theirs, want)
        note = (f" (gloo not compared: {GLOO_AVG['reduce_scatter']}; "
                f"gloo-vs-reference={gloo_ref:.2g})")
        vs_gloo = float("nan")
    else:
        # the results gloo made (it leaves out those of its AVG where GLOO_AVG names a fault)
        mine = {k: v for k, v in ours.items() if k in theirs}
        if want is not None:
            gloo_ref = rel_diff(theirs, {k: want[k] for k in theirs})
            check(gloo_ref <= REL, f"{name}: gloo differs from the reference by {gloo_ref:g}")
        vs_gloo = rel_diff(mine, theirs)
        tolerance = VS_GLOO.get(name, REL)
        check(vs_gloo <= tolerance,
              f"{name}: chorus and gloo differ by {vs_gloo:g} (> {tolerance:g})")
        alone = sorted(set(ours) - set(theirs))
        note = "".join(f" ({k}: against the reference alone: {GLOO_AVG[k.rsplit('_', 1)[0]]})"
                       for k in alone)
    dist.barrier()
    say(f"WORKLOAD PASS {name} chorus-vs-gloo={vs_gloo:.2g} chorus-vs-reference={vs_ref:.2g} "
        f"gloo={middle - start:.2f}s chorus={end - middle:.2f}s{note}")


def main():
    global GLOO_AVG
    tmpdir, names = sys.argv[1], sys.argv[2:]
    if names == ["subset"]:
        names = list(SUBSET)
    elif names == ["all"]:
        names = list(WORKLOADS)
    unknown = [x for x in names if x not in WORKLOADS]
    if unknown or not names:
        fail(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    rank, n = init()
    gloo = dist.new_group(backend="gloo")
    backends = (dist.get_backend(dist.group.WORLD), dist.get_backend(gloo))
    check(backends == ("chorus", "gloo"), f"the groups' backends are {backends}")
    ctx = Ctx(rank, n, tmpdir)
    GLOO_AVG = gloo_avg_faults(gloo, n, rank)
    if rank == 0:
        say("WORKLOAD PLAN " + " ".join(names))
    for name in names:
        run_workload(ctx, gloo, name)
    dist.barrier()
    say(f"OK workloads torch {torch.__version__}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
