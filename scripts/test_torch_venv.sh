#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The torch tests on torch VERSION from the package index (`make test-torch TORCH=2.15`): the
# cached virtual environment of scripts/torch_venv.sh (made the first time: a download of
# several GB), the library, chorusrun and the Python package built against its torch into
# build-torch-VERSION/, then the cases of tests/torch/run_torch_tests.py's "torch26" selection
# (each scenario once, at 4 ranks where it has a 2-rank twin), two at a time, or the command
# given (run from the source tree with CHORUS_PYTHONPATH and CHORUS_CHORUSRUN set to that
# build's and the venv's bin/ first on PATH, so python3 is the venv's).
#   scripts/test_torch_venv.sh VERSION [COMMAND...]
# buildtype plain (no optimization: this leg checks torch's API and behaviour, not speed) and
# torch_unity, as the torch 2.6 leg; the library's files one by one (ccache finds them again
# from any clone). Warnings are errors, as in the default leg (the same g++).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/test_torch_venv.sh VERSION [COMMAND...]}"
shift
start=$SECONDS
venv=$(scripts/torch_venv.sh "$version")
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')
echo "test-torch: torch $torch_version in $venv ($((SECONDS - start)) s)"
build="build-torch-$torch_version"
if [ ! -f "$build/build.ninja" ]; then
  rm -rf "$build"
  log=$(mktemp)
  if ! meson setup "$build" -Dpython="$venv/bin/python" -Dtorch=enabled -Dtests=false \
      -Dbench=false -Dexamples=false -Dbuildtype=plain -Dtorch_unity=true > "$log" 2>&1; then
    grep ERROR "$log" >&2 || tail -20 "$log" >&2
    rm -rf "$build" "$log"
    echo "test-torch: meson setup of $build failed" >&2
    exit 1
  fi
  rm -f "$log"
fi
ninja -C "$build" --quiet torch-package tools/chorusrun
echo "test-torch: built $build ($((SECONDS - start)) s)"
command=("$@")
[ ${#command[@]} -gt 0 ] || command=(python3 tests/torch/run_torch_tests.py --jobs 2 torch26)
status=0
PATH="$venv/bin:$PATH" CHORUS_PYTHONPATH="$PWD/$build/python" \
  CHORUS_CHORUSRUN="$PWD/$build/tools/chorusrun" CHORUS_TRACE_DIR="$PWD/$build/trace-dumps" \
  "${command[@]}" || status=$?
echo "test-torch: torch $torch_version done in $((SECONDS - start)) s"
exit $status
