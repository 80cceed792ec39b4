# SPDX-License-Identifier: BSD-3-Clause
"""chorus.torch's DDP hooks on a group made with each backend string torch accepts.
usage: backend_string_check.py SPEC   (RANK, WORLD_SIZE, MASTER_* in the environment)

SPEC is "chorus", or on torch 2.x a device-qualified form ("cpu:chorus",
"cpu:chorus,cuda:gloo"): init_process_group(SPEC), then DDP from the same weights and data with
chorus.torch.allreduce_hook and with chorus.torch.bf16_wire_hook on the default group, and with
no hook on a gloo group. Both hooks must take the chorus path: allreduce_hook moves the large
bucket into a SharedBuffer (its fallback for other backends moves nothing), bf16_wire_hook does
not refuse the group; and both end with gloo's parameters (one host: the wire carries full
precision). A subgroup made with new_group(backend=SPEC) takes allreduce_hook's chorus path too.
On the gloo group, bf16_wire_hook refuses, naming the backend, and allreduce_hook averages as
DDP does. Prints "OK backend SPEC". One SPEC a launch: torch 2.x's env:// keeps a destroyed
default group's TCPStore in the process and serves the next init_process_group from it, where a
chorus group formed again under the same name meets its predecessor's records."""
import datetime
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch
from common import check, say


def train(group, hook, rank):
    """Parameters after three SGD steps of DDP on `group` with `hook`, and whether the first
    layer's gradient (a view of its 1 MiB bucket) ended in a SharedBuffer."""
    torch.manual_seed(7)
    module = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                 torch.nn.Linear(512, 4))
    model = DDP(module, process_group=group, gradient_as_bucket_view=True)
    if hook is not None:
        model.register_comm_hook(group, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        x, y = torch.randn(8, 512, generator=data), torch.randn(8, 4, generator=data)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    shared = chorus.torch._C.in_shared_buffer(module[0].weight.grad)
    return [p.detach().clone() for p in module.parameters()], shared


def max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def one(spec):
    dist.init_process_group(spec, init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    sub = dist.new_group(list(range(n)), backend=spec)
    reference, _ = train(gloo, None, rank)
    for name, group, hook in (("allreduce_hook", None, chorus.torch.allreduce_hook),
                              ("allreduce_hook on new_group", sub, chorus.torch.allreduce_hook),
                              ("bf16_wire_hook", None, chorus.torch.bf16_wire_hook)):
        try:
            params, shared = train(group, hook, rank)
        except (ValueError, RuntimeError) as e:
            check(False, f"{spec}: {name} refused the group: {e}")
        diff = max_diff(params, reference)
        check(diff < 1e-5, f"{spec}: DDP with {name} differs from DDP on gloo by {diff}")
        if hook is chorus.torch.allreduce_hook:
            check(shared, f"{spec}: {name} took the fallback (its bucket is not in a "
                  "SharedBuffer): the group did not read as chorus")
    params, shared = train(gloo, chorus.torch.allreduce_hook, rank)
    check(max_diff(params, reference) < 1e-5 and not shared,
          f"{spec}: allreduce_hook on a gloo group is not DDP's averaging")
    try:
        train(gloo, chorus.torch.bf16_wire_hook, rank)
        check(False, f"{spec}: bf16_wire_hook took a gloo group")
    except (ValueError, RuntimeError) as e:  # torch 1.13's autograd wraps the hook's error
        check("gloo" in str(e) and "bf16_compress_hook" in str(e),
              f"{spec}: bf16_wire_hook's refusal does not name gloo: {e}")
    dist.destroy_process_group()
    say(f"OK backend {spec}")


one(sys.argv[1])
