# SPDX-License-Identifier: BSD-3-Clause
"""chorus: collective communication that never hangs silently.

``import chorus.torch`` registers the torch.distributed backend ``"chorus"``; then
``torch.distributed.init_process_group("chorus", ...)`` runs a script's collectives on chorus.
"""
