# SPDX-License-Identifier: BSD-3-Clause
"""The check that runs before chorus._C is loaded: _C holds torch's C++ classes and calls into
torch's libraries, whose C++ interface changes between minor releases. Loaded under another
minor it fails with an undefined symbol at best and crashes at worst, so a mismatch is an
ImportError that says which build to get instead."""
import torch

from ._version import DISTRIBUTION, __torch_version__, __version__


def _minor(version):
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2])


def check_torch():
    running = torch.__version__.split("+")[0]
    try:
        same = _minor(running) == _minor(__torch_version__)
    except ValueError:  # a version string that is not N.N...: let the import decide
        return
    if same:
        return
    built = ".".join(str(n) for n in _minor(__torch_version__))
    wanted = ".".join(str(n) for n in _minor(running))
    raise ImportError(
        f"chorus {__version__} was built for torch {built} ({__torch_version__}), and this "
        f"environment has torch {running}: chorus's torch backend runs only under the torch "
        f"minor release it was compiled against. Install the build for torch {wanted}: "
        f"pip install '{DISTRIBUTION}=={__version__}+torch{wanted}' (a wheel from `make wheels "
        f"TORCH={wanted}`), or build chorus against this torch from its source tree: "
        f"pip install --no-build-isolation .")
