# SPDX-License-Identifier: BSD-3-Clause
"""Registers the torch.distributed backend "chorus".

Moving a DDP script from gloo to chorus is two lines::

    import chorus.torch
    torch.distributed.init_process_group("chorus", init_method="env://", timeout=...)

Every torch group of backend "chorus" (the default group and ``new_group`` subgroups) is a
chorus tcp group on CPU tensors, bootstrapped through the store torch's rendezvous made.
"""
import inspect

import torch.distributed as _dist

from . import _C

__all__ = ["ProcessGroupChorus", "BACKEND"]

BACKEND = "chorus"
ProcessGroupChorus = _C.ProcessGroupChorus


def _group_name(opts):
    # Every member computes the same name: the default group is "world"; a subgroup is named
    # by torch's group id (the same on every rank) and its global ranks.
    ranks = list(opts.global_ranks_in_group or [])
    if not ranks:
        return "world"
    shown = ",".join(str(r) for r in ranks[:8]) + (",..." if len(ranks) > 8 else "")
    return f"pg{opts.group_id}[{shown}]"


def _create(opts, backend_options=None):
    return _C.ProcessGroupChorus(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                 _group_name(opts))


def _register():
    if hasattr(_dist.Backend, BACKEND.upper()):
        return  # already registered (a second import under another module name)
    kwargs = {"extended_api": True}
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu"]  # torch 2.x: a backend names the devices it serves
    _dist.Backend.register_backend(BACKEND, _create, **kwargs)


_register()
