#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""DDP's gradient averaging through the chorus backend, with and without
chorus.torch.allreduce_hook (which moves DDP's buckets into SharedBuffers), in one launch.

    build/tools/chorusrun --standalone --no-prefix -n 4 /usr/bin/python3 bench/torch_ddp_step.py

--variants picks the DDP copies that take turns (default ddp,hook): ddp (DDP's own averaging on
chorus), hook (chorus.torch.allreduce_hook), wire (chorus.torch.bf16_wire_hook: a bfloat16
wire between hosts), chorus_bf16 (torch's bf16_compress_hook on chorus), gloo (DDP on a gloo
group of the same ranks), gloo_fp16 (torch's fp16_compress_hook on gloo); --gloo adds gloo.
bench/netns_ddp_wire.sh runs wire, chorus_bf16, gloo_fp16 and gloo on a namespace cluster,
where the wire matters.

Two DDP models of the same parameters (three with --gloo: DDP on a gloo group as well) (--grads-mib in parameters of --param-mib each) take turns,
--steps steps each per round, for --rounds rounds: one with DDP's own averaging, one with the
hook. The model does almost no arithmetic (each parameter times the input, summed), so a
step's time is DDP's work: copying gradients into buckets, averaging them across the ranks,
and, without gradient_as_bucket_view, copying them back. Every step's gradients are checked
(each must equal the mean of the ranks' inputs). Prints, on rank 0, the slowest rank's median
step time per variant and their ratio. Run it on one host: the hook helps where the group's
ranks map each other's memory; elsewhere both variants take the same path.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import chorus.torch


class ManyParameters(torch.nn.Module):
    def __init__(self, count, numel):
        super().__init__()
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(numel)) for _ in range(count)])

    def forward(self, x):
        return sum((w * x).sum() for w in self.weights)


def _compress_hook(bits):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = getattr(default_hooks, f"{bits}_compress_hook")

    # torch's hook under another name: torch 1.13's DDP refuses bf16_compress_hook by its name
    # on a torch built without CUDA, although the hook is plain torch.distributed code.
    def compress_hook_cpu(process_group, bucket):
        return hook(process_group, bucket)
    return compress_hook_cpu


# name -> (what it is, a function returning its DDP comm hook or None). torch's
# bf16_compress_hook cannot run on gloo (gloo has no bfloat16: "Invalid scalar type"), so it runs
# on the chorus group (chorus_bf16); gloo_fp16 is torch's fp16_compress_hook, which gloo runs.
VARIANTS = {
    "ddp": ("DDP's own averaging (chorus)", None),
    "hook": ("chorus.torch.allreduce_hook", lambda: chorus.torch.allreduce_hook),
    "wire": ("chorus.torch.bf16_wire_hook", lambda: chorus.torch.bf16_wire_hook),
    "chorus_bf16": ("bf16_compress_hook on chorus", lambda: _compress_hook("bf16")),
    "gloo": ("DDP on gloo", None),
    "gloo_fp16": ("fp16_compress_hook on gloo", lambda: _compress_hook("fp16")),
}


def step(model, module, x, want):
    start = time.perf_counter()
    model(x).backward()
    took = time.perf_counter() - start
    for w in module.parameters():
        if not bool((w.grad == want).all()):
            raise SystemExit(f"rank {dist.get_rank()}: wrong gradient (want {want})")
        w.grad = None
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grads-mib", type=int, default=128, help="gradient MiB per rank (128)")
    ap.add_argument("--param-mib", type=int, default=16, help="MiB per parameter (16)")
    ap.add_argument("--bucket-mb", type=int, default=25, help="DDP's bucket_cap_mb (25)")
    ap.add_argument("--view", type=int, choices=(0, 1), default=1,
                    help="gradient_as_bucket_view (1: gradients are views of the buckets)")
    ap.add_argument("--steps", type=int, default=5, help="steps per variant per round (5)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds (4; the first is warm-up)")
    ap.add_argument("--gloo", action="store_true",
                    help="a third variant: DDP on a gloo group of the same ranks")
    ap.add_argument("--variants", default="ddp,hook",
                    help="comma list of " + ", ".join(VARIANTS) + " (default ddp,hook)")
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v] + (["gloo"] if args.gloo else [])
    unknown = set(names) - set(VARIANTS)
    if unknown or not names:
        raise SystemExit(f"--variants: unknown {sorted(unknown)}; use {', '.join(VARIANTS)}")

    dist.init_process_group("chorus", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    numel = args.param_mib << 18  # float32
    count = max(1, args.grads_mib // args.param_mib)
    on_gloo = any(name.startswith("gloo") for name in names)
    gloo = dist.new_group(backend="gloo") if on_gloo else None
    variants = {}
    for name in names:
        module = ManyParameters(count, numel)
        group = gloo if name.startswith("gloo") else None
        model = DistributedDataParallel(module, bucket_cap_mb=args.bucket_mb,
                                        gradient_as_bucket_view=bool(args.view),
                                        process_group=group)
        if VARIANTS[name][1] is not None:
            model.register_comm_hook(group, VARIANTS[name][1]())
        variants[name] = (model, module, [])
    x = torch.tensor(float(rank + 1))
    want = (n + 1) / 2  # the mean of 1..n
    for r in range(args.rounds):
        for model, module, times in variants.values():
            dist.barrier()
            took = [step(model, module, x, want) for _ in range(args.steps)]
            if r > 0:
                times.extend(took)
    medians = torch.tensor([statistics.median(v[2]) for v in variants.values()],
                           dtype=torch.float64)
    dist.all_reduce(medians, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"# {n} ranks, {count * args.param_mib} MiB of float32 gradients, bucket_cap_mb "
              f"{args.bucket_mb}, gradient_as_bucket_view {bool(args.view)}; median step, "
              f"slowest rank, {(args.rounds - 1) * args.steps} steps each")
        first = float(medians[0])
        for name, m in zip(variants, medians):
            print(f"{VARIANTS[name][0]:38} {float(m) * 1e3:9.1f} ms   "
                  f"({first / float(m):.2f}x the speed of {names[0]})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
