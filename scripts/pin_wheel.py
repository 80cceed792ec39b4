#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Pins a chorus wheel to the torch minor release it was built against.

    scripts/pin_wheel.py WHEEL TORCH_MINOR OUTDIR

chorus._C runs only under the torch minor it was compiled against, so each wheel's metadata
says so: its version gets the local label +torchX.Y (wheels for several torches side by side,
`pip install 'chorus-collectives==0.7.0+torch2.11'` picks one) and its requirement on torch
becomes torch==X.Y.* (pip never installs it beside another torch). Writes the new wheel into
OUTDIR with the dist-info and .data folders renamed and RECORD's hashes made anew; prints its
path.
"""
import base64
import hashlib
import os
import re
import sys
import zipfile


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def pin(wheel, minor, outdir):
    name = os.path.basename(wheel)
    dist, version, rest = name.split("-", 2)
    if "+" in version:
        sys.exit(f"pin_wheel: {name} already has a local version label")
    if not re.fullmatch(r"\d+\.\d+", minor):
        sys.exit(f"pin_wheel: '{minor}' is not a torch minor release (X.Y)")
    pinned = f"{version}+torch{minor}"
    old_info, new_info = f"{dist}-{version}.dist-info", f"{dist}-{pinned}.dist-info"
    old_data, new_data = f"{dist}-{version}.data/", f"{dist}-{pinned}.data/"
    out = os.path.join(outdir, f"{dist}-{pinned}-{rest}")
    with zipfile.ZipFile(wheel) as src:
        files = {}
        for item in src.infolist():
            if item.filename == f"{old_info}/RECORD":
                continue
            data = src.read(item)
            # The dist-info and .data folders are named by the version, so they move with it.
            target = item.filename
            for old, new in ((old_info + "/", new_info + "/"), (old_data, new_data)):
                if target.startswith(old):
                    target = new + target[len(old):]
            if target == f"{new_info}/METADATA":
                text = data.decode()
                text, n_version = re.subn(r"(?m)^Version: .*$", f"Version: {pinned}", text)
                text, n_torch = re.subn(r"(?m)^Requires-Dist: torch\b.*$",
                                        f"Requires-Dist: torch=={minor}.*", text)
                if n_version != 1 or n_torch != 1:
                    sys.exit(f"pin_wheel: {name}'s METADATA lacks its Version or torch line")
                data = text.encode()
            files[target] = (item, data)
    if f"{new_info}/METADATA" not in files:
        sys.exit(f"pin_wheel: {name} has no {old_info}/METADATA")
    record = [f"{path},{record_hash(data)},{len(data)}" for path, (_, data) in files.items()]
    record.append(f"{new_info}/RECORD,,")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for path, (item, data) in files.items():
            info = zipfile.ZipInfo(path, item.date_time)
            info.external_attr = item.external_attr
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
        dst.writestr(f"{new_info}/RECORD", "\n".join(record) + "\n")
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    pin(*sys.argv[1:])
