# SPDX-License-Identifier: BSD-3-Clause
"""The stranger of case "stranger" (run_torch_tests.py), run as an unprivileged local user:
reads every key chorus keeps in a running job's torch store, with a plain TCPStore client, and
tries to join the group with whatever it found.
usage: stranger.py HOST PORT PROBE

torch 1.13's TCPStore cannot list keys, so it reads the keys of chorus's layout
(src/cpu/bootstrap/membership.hpp) for the world group, under the prefix torch gives it ("default_pg/0/").
Then chorus_join_probe (PROBE) dials rank 0 at the address in the record claiming rank 2, once
per candidate key: each 64-hex-digit value found in the store taken as the secret (what a
tokenless rank uses), and a secret derived from a wrong job token. Prints "READ key = value"
per key read and the probe's lines; at the end it sets "stranger/done", which releases the
ranks."""
import datetime
import os
import re
import subprocess
import sys

import torch
import torch.distributed as dist

host, port, probe = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"STRANGER uid={os.geteuid()}", flush=True)
extra = {"use_libuv": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
store = dist.TCPStore(host, port, 1, False, datetime.timedelta(seconds=10), **extra)
group = "default_pg/0/tcp/g1/"
try:
    found = {}

    def read(key):
        # torch 1.13's TCPStore has no check(), and a get() that times out leaves its connection
        # out of step: a compare_set that can never match returns the value, or (absent) the
        # expected value, without changing anything.
        never = "\x01never-stored"
        value = store.compare_set(group + key, never, never).decode()
        if value != never:
            found[key] = value
            print(f"READ {group + key} = {value}", flush=True)

    read("current")
    current = found.get("current", "")
    fields = current.split()
    if len(fields) < 6:
        print(f"STRANGER: no chorus record at {group}current", flush=True)
        sys.exit(1)
    epoch, size, address = fields[0], int(fields[1]), fields[4]
    for name in ["joined", "state", "gone", "missing", "timeouts", "left"]:
        read(f"e{epoch}/{name}")
    for r in range(size):
        read(f"e{epoch}/claim/{r}")
    candidates = sorted({h for v in found.values() for h in re.findall(r"\b[0-9a-f]{64}\b", v)})
    keys = [f"hex:{h}" for h in candidates] + ["token:not-the-job-token-0123456789abcdef"]
    print(f"STRANGER: read {len(found)} keys; trying {len(keys)} keys against rank 0 at {address}",
          flush=True)
    result = subprocess.run([probe, address, current, "2", "0", "2", *keys], capture_output=True,
                            text=True, timeout=60)
    print(result.stdout + result.stderr, end="", flush=True)
    sys.exit(result.returncode)
finally:
    store.set("stranger/done", "1")
