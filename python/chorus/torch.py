# SPDX-License-Identifier: BSD-3-Clause
"""Registers the torch.distributed backend "chorus".

Moving a DDP script from gloo to chorus is two lines::

    import chorus.torch
    torch.distributed.init_process_group("chorus", init_method="env://", timeout=...)

Every torch group of backend "chorus" (the default group and ``new_group`` subgroups) is a
chorus tcp group on CPU tensors, bootstrapped through the store torch's rendezvous made.
"""
import atexit
import contextlib
import inspect

import torch.distributed as _dist

from ._torch_check import check_torch as _check_torch

_check_torch()
from . import _C  # noqa: E402  (after the check: _C under another torch may crash)

__all__ = ["ProcessGroupChorus", "BACKEND", "shared_empty", "share_", "allreduce_hook",
           "wire_dtype", "bf16_wire_hook", "ElasticGroup"]

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


# The chorus group that the next default group is made of (ElasticGroup._install).
_adopted = None


def _backend_for(group, device_type):
    """The name of the backend that serves `group`'s tensors on `device_type` ("cpu", "cuda"),
    or None if none does. torch 2.x accepts a backend per device: ``"chorus"`` (every device the
    backend registered: chorus registers "cpu"), ``"cpu:chorus"``, ``"cpu:chorus,cuda:nccl"``;
    ``dist.get_backend`` answers the string as given."""
    name = str(_dist.get_backend(group)).lower()
    if ":" not in name:
        return name
    for part in name.split(","):
        device, _, backend = part.partition(":")
        if device.strip() == device_type:
            return backend.strip()
    return None


def _create(opts, backend_options=None):
    if _adopted is not None and (opts.group_rank, opts.group_size) == (_adopted.rank,
                                                                       _adopted.size):
        return _C.adopt(_adopted)
    return _C.ProcessGroupChorus(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                 _group_name(opts))


def shared_empty(*size, dtype=None):
    """A zero-filled CPU tensor in a chorus SharedBuffer (like ``torch.zeros(*size, dtype=)``).

    When every rank of a chorus group whose ranks share one host passes such tensors,
    ``all_reduce``, ``reduce_scatter_tensor``, ``all_gather_into_tensor`` and ``broadcast`` of
    256 KiB and more copy the data once, straight between the ranks' memory, instead of through
    shared rings. Pass them on every rank: where some ranks pass ordinary tensors, the op is
    right but goes through the rings. Elsewhere (several hosts, ``gloo``) it is an
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


def share_(tensor):
    """Moves a CPU tensor's memory into a chorus SharedBuffer in place and returns the tensor.

    Like ``Tensor.share_memory_()``: the values stay, and every tensor that shares the storage
    (views, gradients that are views of a DDP bucket) now lives in the SharedBuffer, so the
    ops ``shared_empty`` names take the single-copy path on it. A no-op for a tensor that is
    there already or empty. Copies the storage once; do not call it while an op on the tensor
    is in flight. A tensor made on other memory (``torch.from_numpy``, ``torch.frombuffer``)
    no longer aliases it afterwards. The memory costs one file descriptor while it lives, and a
    child made by ``fork()`` shares it with its parent.
    """
    if tensor.device.type != "cpu":
        raise ValueError(f"chorus.torch.share_: the tensor is on {tensor.device}; "
                         "SharedBuffers are host memory")
    _C.move_to_shared_buffer(tensor)
    return tensor


def allreduce_hook(process_group, bucket):
    """A DDP communication hook: averages each gradient bucket as DDP does without a hook, with
    the bucket moved into a SharedBuffer (``share_``) the first time it is seen::

        model = DistributedDataParallel(module)
        model.register_comm_hook(None, chorus.torch.allreduce_hook)

    On a chorus group whose ranks share one host, buckets of 256 KiB and more then take the
    single-copy path instead of the shared rings: DDP allocates its buckets itself, so this is
    how they become SharedBuffers. Each bucket is copied once (when DDP makes it: at the first
    step, and again after DDP regroups the buckets at the second). Every rank must register
    the hook, or none: a rank whose bucket is ordinary memory where the others' are shared
    fails the op on every rank. ``process_group`` is the group to average over (None: the
    default group), the state that ``register_comm_hook`` passes; on a group of another backend
    the hook averages as DDP does and moves nothing.
    """
    group = process_group if process_group is not None else _dist.group.WORLD
    tensor = bucket.buffer()
    # gloo has no AVG; SharedBuffers mean nothing there
    if _backend_for(group, tensor.device.type) != BACKEND:
        tensor.div_(_dist.get_world_size(group))
        work = _dist.all_reduce(tensor, group=group, async_op=True)
        return work.get_future().then(lambda _: tensor)
    if tensor.numel() * tensor.element_size() >= _C.shared_buffer_min_bytes:
        _C.move_to_shared_buffer(tensor)
    work = _dist.all_reduce(tensor, op=_dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda _: tensor)


@contextlib.contextmanager
def wire_dtype(dtype):
    """Reductions issued on this thread inside the block travel between hosts in ``dtype``::

        with chorus.torch.wire_dtype(torch.bfloat16):
            dist.all_reduce(grads)            # float32 data, a bfloat16 wire

    ``torch.bfloat16`` or ``torch.float16`` for float32 data, ``torch.float32`` for float64
    data; the data's own dtype means full precision, ``None`` the group's default
    (``CHORUS_WIRE_DTYPE``). It applies to ``all_reduce``, ``reduce_scatter`` and ``reduce``
    with SUM or AVG on a chorus group: partial sums are rounded to ``dtype`` as they leave for
    another host and added in the data's type; links inside a host carry full precision, and
    small ops (a few hundred KiB) keep it too. Every rank must issue the same ops with the same
    wire, or the op fails on every rank naming the difference.
    """
    name = None if dtype is None else str(dtype).replace("torch.", "")
    previous = _C._set_wire_dtype(name)
    try:
        yield
    finally:
        _C._set_wire_dtype(previous)


def bf16_wire_hook(process_group, bucket):
    """A DDP communication hook: averages each float32 gradient bucket in float32, sending it
    between hosts as bfloat16::

        model = DistributedDataParallel(module)
        model.register_comm_hook(None, chorus.torch.bf16_wire_hook)

    Where torch's ``bf16_compress_hook`` rounds every gradient to bfloat16, sums in bfloat16 and
    converts back (extra passes over the bucket, and every addition rounded), chorus rounds only
    a partial sum on its way to another host, adds in float32, and converts one pipeline slice at
    a time inside the allreduce; about half the bytes of a plain allreduce cross the network.
    float64 buckets travel as float32, others at full precision. ``process_group`` is the group
    to average over (None: the default group), which must be a chorus group.
    """
    import torch

    group = process_group if process_group is not None else _dist.group.WORLD
    tensor = bucket.buffer()
    backend = _backend_for(group, tensor.device.type)
    if backend != BACKEND:
        raise ValueError(f"chorus.torch.bf16_wire_hook: the group's {tensor.device.type} "
                         f"tensors go to backend {backend} ({_dist.get_backend(group)!r}), not "
                         f"chorus; on another backend use torch's bf16_compress_hook")
    wire = {torch.float32: torch.bfloat16, torch.float64: torch.float32}.get(tensor.dtype,
                                                                             tensor.dtype)
    with wire_dtype(wire):
        work = _dist.all_reduce(tensor, op=_dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda _: tensor)


class ElasticGroup:
    """torch's default group on a chorus group that loses ranks and takes new ones, without a
    relaunch. Use it instead of ``init_process_group``, under ``chorusrun --elastic``::

        elastic = chorus.torch.ElasticGroup()      # init_process_group("chorus"), elastic
        model = DistributedDataParallel(module)    # on torch's default group, as usual
        ...
        try:
            loss.backward()                        # DDP's allreduce fails if a rank died
        except RuntimeError:
            elastic.shrink()                       # the survivors' default group
            model = DistributedDataParallel(module)  # DDP is made again on the new group
        ...
        if elastic.grow():                         # at a step boundary: joiners let in
            model = DistributedDataParallel(module)  # (DDP's constructor sends rank 0's
                                                   # parameters to the joiners)

    A process that chorusrun restarts (``--max-restarts``) gets ``CHORUS_ELASTIC_JOIN=1``; its
    ``ElasticGroup()`` waits for the members' next ``grow()`` and ``joined`` is then True.
    After each change, torch's default group is a new one (``destroy_process_group`` then
    ``init_process_group`` on the new chorus group): everything made on the old one must be
    made again (DDP, subgroups from ``new_group``), and the world size the program divides by
    must be read again. The store is chorus's (chorusrun hosts it, so it outlives any rank),
    under the job's run id; ``store`` is it, as a torch Store, for the program's own keys.
    """

    def __init__(self, timeout=None):
        import datetime

        self._timeout = timeout or datetime.timedelta(minutes=10)
        group, store, self.launch_rank, self.joined = _C.init_world(self._timeout)
        self.store = store
        self._install(group)

    @property
    def rank(self):
        return self._group.rank

    @property
    def world_size(self):
        return self._group.size

    @property
    def name(self):
        """The chorus group's name: "world", then "world/shrink0", "world/grow1" ..."""
        return self._group.name

    def shrink(self, grace=2.0, join_timeout=10.0):
        """After an op failed: agree with the other survivors on who is left (waiting up to
        ``grace`` seconds for a rank not known to be dead) and make torch's default group of
        them. A rank that arrives after they decided raises RuntimeError ("fenced out")."""
        self._install(self._group.shrink(grace, join_timeout))

    def grow(self, wait=0.0, join_timeout=10.0):
        """At a step boundary, on every rank: let in the processes waiting to join (waiting up
        to ``wait`` seconds for a first one). True when the world grew (torch's default group is
        then the larger one: send the joiners the state), False when nobody was waiting."""
        larger = self._group.grow(wait, join_timeout)
        if larger is None:
            return False
        self._install(larger)
        return True

    def stop_admitting(self, reason="the job finished"):
        """Joiners waiting now or later give up with ``reason``."""
        self._group.stop_admitting(reason)

    def _install(self, group):
        global _adopted
        if _dist.is_initialized():
            _dist.destroy_process_group()
        # torch's own keys for this group (its init barrier, on torch 1.13) go under the group's
        # name, which every member has and no earlier group had.
        store = _dist.PrefixStore(f"torch/{group.name}", self.store)
        _adopted = group
        try:
            _dist.init_process_group(BACKEND, store=store, rank=group.rank,
                                     world_size=group.size, timeout=self._timeout)
        finally:
            _adopted = None
        self._group = group


def _register():
    if hasattr(_dist.Backend, BACKEND.upper()):
        return  # already registered (a second import under another module name)
    kwargs = {"extended_api": True}
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu"]  # torch 2.x: a backend names the devices it serves
    _dist.Backend.register_backend(BACKEND, _create, **kwargs)


_register()
# Before the interpreter finalizes: no chorus thread may take the GIL after that (see
# quiesce_for_exit in python/src/torch_work.hpp).
atexit.register(_C._quiesce_at_exit)
