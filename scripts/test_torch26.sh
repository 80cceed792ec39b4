#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The torch 2.6 leg of `make test`: builds the library, chorusrun and the Python package inside
# the Debian 13 root (scripts/torch26_root.sh, cached) into build-torch26/, then runs the cases
# of tests/torch/run_torch_tests.py's "torch26" selection there (each scenario once, at 4 ranks
# where it has a 2-rank twin), two at a time (the default leg's meson runs its torch
# tests two at a time too; a case is mostly waiting), or the command given (run from the source tree, seen
# as /chorus, with CHORUS_PYTHONPATH and CHORUS_CHORUSRUN set to that build's). Needs root
# (debootstrap, chroot, a mount namespace).
#   scripts/test_torch26.sh [COMMAND...]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
root=$(scripts/torch26_root.sh)
echo "test-torch26: Debian 13 root ready at $root ($((SECONDS - start)) s)"
# werror off and -Wstringop-overflow/-overread silenced: g++ 14 reports false positives of
# those in code g++ 12 and clang build cleanly (std::vector growth inlined into
# src/store/protocol.cpp); the default leg keeps every warning and werror. buildtype plain (no
# optimization) compiles in about half the time: this leg checks torch 2.x's API and behaviour,
# not speed. ccache's directory lives in the cached root (CCACHE_DISABLE=1 passes through, for
# honest build timings). Only what the tests run is built: the Python package (meson alias
# torch-package) and chorusrun. torch_unity: the extension's files as one translation unit
# (they parse the same torch headers: a quarter of their compile time); library_unity: the
# library's files as unity files of about 8 (src/meson.build); the default leg compiles the
# library's files one by one.
command=("$@")
[ ${#command[@]} -gt 0 ] || command=(python3 tests/torch/run_torch_tests.py --jobs 2 torch26)
scripts/in_torch26_root.sh "$root" env CCACHE_DISABLE="${CCACHE_DISABLE:-}" bash -c '
  set -e
  cd /chorus
  export CCACHE_DIR=/root/.ccache
  [ -n "$CCACHE_DISABLE" ] || unset CCACHE_DISABLE
  if [ ! -f build-torch26/build.ninja ]; then
    meson setup build-torch26 -Dtorch=enabled -Dtests=false -Dbench=false -Dexamples=false \
      -Dbuildtype=plain -Dtorch_unity=true -Dlibrary_unity=true -Dwerror=false -Dcpp_args="-Wno-stringop-overflow -Wno-stringop-overread" \
      >/dev/null
  fi
  ninja -C build-torch26 --quiet torch-package tools/chorusrun
  python3 -c "import torch; print(\"test-torch26: torch\", torch.__version__)"
  CHORUS_PYTHONPATH=/chorus/build-torch26/python \
    CHORUS_CHORUSRUN=/chorus/build-torch26/tools/chorusrun \
    CHORUS_TRACE_DIR=/chorus/build-torch26/trace-dumps \
    "$@"
' bash "${command[@]}"
echo "test-torch26: done in $((SECONDS - start)) s"
