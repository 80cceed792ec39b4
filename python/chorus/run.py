# SPDX-License-Identifier: BSD-3-Clause
"""``python3 -m chorus.run ARGS`` runs ``chorusrun ARGS``: the launcher for an environment whose
bin/ is not on PATH (the same flags; ``python3 -m chorus.run --help``).

The chorusrun binary is the one of this package: the build tree's (build/tools/chorusrun when
the package is imported from build/python), else the one pip installed with it (the package's
RECORD names it: the environment's bin/). A PROGRAM ending in .py runs under this interpreter
unless $CHORUS_PYTHON says otherwise.
"""
import os
import sys

__all__ = ["chorusrun_path", "main"]


def _installed():
    try:
        from importlib import metadata
        files = metadata.distribution("chorus").files or []
    except Exception:  # noqa: BLE001 - not installed by pip: no record to read
        return None
    for f in files:
        if f.name == "chorusrun":
            path = os.path.realpath(str(f.locate()))
            if os.access(path, os.X_OK):
                return path
    return None


def chorusrun_path():
    """The chorusrun that belongs to this chorus package; raises FileNotFoundError when none."""
    here = os.path.dirname(os.path.abspath(__file__))
    # build/python/chorus/run.py -> build/tools/chorusrun
    built = os.path.join(os.path.dirname(os.path.dirname(here)), "tools", "chorusrun")
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return built
    installed = _installed()
    if installed:
        return installed
    beside = os.path.join(os.path.dirname(sys.executable), "chorusrun")
    if os.access(beside, os.X_OK):
        return beside
    raise FileNotFoundError(f"chorus.run: no chorusrun beside the chorus package at {here} "
                            f"(neither the build tree's tools/ nor an installed one)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        path = chorusrun_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 127
    env = dict(os.environ)
    env.setdefault("CHORUS_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path, *argv], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
