#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A virtual environment holding torch==VERSION from the package index, made once and cached:
# prints its directory (the only line on stdout; progress goes to stderr).
#   scripts/torch_venv.sh VERSION
#
# The index's Linux x86_64 torch is the CUDA build (torch and its nvidia-* wheels, several
# GB), so each venv is made once per version and Python and reused: a repeat run asks the
# index nothing and downloads nothing. The wheels it downloaded are kept in wheels/ beside the
# venvs (pip's HTTP cache cannot be relied on: behind some proxies it stores nothing), and
# installs come from there alone: a venv made again after its removal, or another version's
# that pins the same nvidia-* wheels, downloads only what wheels/ lacks.
#
# Where: $CHORUS_TORCH_VENVS/torch-VERSION-cpXY, by default ${XDG_CACHE_HOME:-~/.cache}/chorus
# (outside the checkout: a fresh clone reuses it). The Python is $CHORUS_VENV_PYTHON, by
# default /usr/bin/python3 (Debian 12's 3.11). The venv holds what building and testing
# chorus's torch backend needs: torch, numpy (torch warns without it), meson-python, meson and
# ninja (the build, `pip install --no-build-isolation .`), expecttest and pytest (torch's own
# distributed suite). torch's wheel carries pybind11 in torch/include.
#
# Two runs at once (parallel legs) take turns on a lock beside the venv: the second finds the
# first one's venv. A venv is complete only with its .chorus-complete stamp, written last;
# one without it (an interrupted run) is made again.
set -euo pipefail
version="${1:?usage: scripts/torch_venv.sh VERSION (a torch release on the package index, e.g. 2.15.0)}"
py="${CHORUS_VENV_PYTHON:-/usr/bin/python3}"
root="${CHORUS_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/chorus}"
# A minor alone (2.15) means that minor's newest patch release known here.
case "$version" in
  1.13) version=1.13.1 ;; 2.0) version=2.0.1 ;; 2.1) version=2.1.2 ;; 2.2) version=2.2.2 ;;
  2.3) version=2.3.1 ;; 2.4) version=2.4.1 ;; 2.5) version=2.5.1 ;; 2.7) version=2.7.1 ;;
  2.9) version=2.9.1 ;; 2.12) version=2.12.1 ;; 2.14) version=2.14.1 ;;
  [0-9]*.[0-9]*.[0-9]*) ;;
  [0-9]*.[0-9]*) version="$version.0" ;;
  *) echo "torch_venv: '$version' is not a torch version" >&2; exit 2 ;;
esac
tag="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
venv="$root/torch-$version-$tag"
stamp="$venv/.chorus-complete"

mkdir -p "$root"
exec 9> "$venv.lock"
if ! flock -n 9; then
  echo "torch_venv: waiting for another run making $venv" >&2
  flock 9
fi
if [ -f "$stamp" ]; then
  echo "$venv"
  exit 0
fi

start=$SECONDS
echo "torch_venv: making $venv (torch $version from the package index; several GB the first time)" >&2
rm -rf "$venv"
wheels="$root/wheels"
mkdir -p "$wheels"
"$py" -m venv "$venv" >&2
. "$(dirname "$0")/cached_pip_install.sh"
cached_pip_install "$venv/bin/python" "$wheels" \
  "torch==$version" numpy "meson-python>=0.13" "meson>=1.1" ninja expecttest pytest
got="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
case "$got" in
  "$version"|"$version"+*) ;;
  *) echo "torch_venv: $venv holds torch $got, not $version" >&2; exit 1 ;;
esac
"$venv/bin/python" -m pip freeze --disable-pip-version-check > "$venv/requirements.lock"
touch "$stamp"
echo "torch_venv: made $venv in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))" >&2
echo "$venv"
