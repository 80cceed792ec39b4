# SPDX-License-Identifier: BSD-3-Clause
"""For torchrun on a torch built without libuv (Debian 13's torch 2.6). On PYTHONPATH only for
the tests' torchrun launches, in the agent and in every worker.

Such a torch fails every TCPStore made with its default use_libuv=True. Its env:// rendezvous
honours USE_LIBUV=0, but torchrun's rendezvous handlers and the workers' agent-store client
construct TCPStore without asking, so torchrun cannot run any script, on any backend. This
turns TCPStore's default off before those modules import the name."""
import os

if os.environ.get("USE_LIBUV") == "0":
    import torch

    if int(torch.__version__.split(".")[0]) >= 2:
        import torch.distributed as dist

        _TCPStore = dist.TCPStore

        class TCPStoreWithoutLibuv(_TCPStore):
            def __init__(self, *args, **kwargs):
                kwargs.setdefault("use_libuv", False)
                super().__init__(*args, **kwargs)

        dist.TCPStore = TCPStoreWithoutLibuv
        import sys

        import torch.distributed.rendezvous  # noqa: F401  (the attribute is a function of that name)

        sys.modules["torch.distributed.rendezvous"].TCPStore = TCPStoreWithoutLibuv
