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

__all__ = ["ProcessGroupChorus", "BACKEND", "shared_empty"]

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


def shared_empty(*size, dtype=None):
    """A zero-filled CPU tensor in a chorus SharedBuffer (like ``torch.zeros(*size, dtype=)``).

    When every rank of a chorus group whose ranks share one host passes such tensors,
    ``all_reduce``, ``reduce_scatter_tensor``, ``all_gather_into_tensor`` and ``broadcast`` of
    256 KiB and more copy the data once, straight between the ranks' memory, instead of through
    shared rings. Pass them on every rank or on none: a rank that differs fails the op on every
    rank with a mismatch naming SharedBuffer memory. Elsewhere (several hosts, ``gloo``) it is an
    ordinary tensor. Views of it (slices, ``view``) count as long as they are contiguous.
    """
    import torch

    shape = torch.Size(size[0] if len(size) == 1 and not isinstance(size[0], int) else size)
    dtype = dtype or torch.get_default_dtype()
    numel = shape.numel()
    if numel == 0:
        return torch.zeros(shape, dtype=dtype)
    memory = _C.SharedBuffer(numel * torch.empty((), dtype=dtype).element_size())
    return torch.frombuffer(memory, dtype=dtype, count=numel).view(shape)


def _register():
    if hasattr(_dist.Backend, BACKEND.upper()):
        return  # already registered (a second import under another module name)
    kwargs = {"extended_api": True}
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu"]  # torch 2.x: a backend names the devices it serves
    _dist.Backend.register_backend(BACKEND, _create, **kwargs)


_register()
