# SPDX-License-Identifier: BSD-3-Clause
"""chorus: collective communication that never hangs silently.

``import chorus.torch`` registers the torch.distributed backend ``"chorus"``; then
``torch.distributed.init_process_group("chorus", ...)`` runs a script's collectives on chorus.
``python3 -m chorus.run`` is the launcher ``chorusrun``.
"""
from ._version import __version__

__all__ = ["__version__"]
