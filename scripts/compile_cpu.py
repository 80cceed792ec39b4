#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Compiles one translation unit of a build dir, ccache off, and prints the compiler's CPU seconds.

    scripts/compile_cpu.py BUILD_DIR FILE_SUFFIX [EXTRA_FLAG...]

Takes the file's exact command from BUILD_DIR/compile_commands.json, drops ccache and the
dependency-file flags, appends EXTRA_FLAGs (after meson's -O2 -g, so -O1 or -g1 there win) and
writes the object to a temporary file. CPU seconds (user + system), not wall: on a shared machine
only they compare. docs/results.md, "`make test` on 2 cores", was measured with it.
"""
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, suffix, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if e["file"].endswith(suffix)]
    if len(entries) == 0:
        sys.exit(f"no file ending in {suffix} in {build}/compile_commands.json")
    entry = entries[0]  # a file compiled for several targets: the first, they cost the same
    args = [a for a in shlex.split(entry["command"]) if a != "ccache"]
    kept = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("-MQ", "-MF", "-o"):
            skip = True
        elif a != "-MD":
            kept.append(a)
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "out.o")
        # The last two arguments are "-c SOURCE".
        command = kept[:-2] + extra + ["-o", obj] + kept[-2:]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        rc = subprocess.run(command, cwd=entry["directory"],
                            env=dict(os.environ, CCACHE_DISABLE="1")).returncode
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        size = os.path.getsize(obj) // 1024 if rc == 0 else 0
    print(f"{suffix} {' '.join(extra) or '(as built)'}: {cpu:.1f} s CPU, {wall:.1f} s wall, "
          f"object {size} KiB, exit {rc}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
