#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make test-torch-suite`: torch's own distributed test suite (tests/torch/suite/run_suite.py),
# whole, for gloo and for chorus, at each world size, on the system's torch 1.13, on torch 2.6
# in the Debian 13 root (scripts/test_torch26.sh) and on the newest torch from the package index
# (2.15, scripts/test_torch_venv.sh; any release there can be named). Then
# tests/torch/suite/compare.py per pair: totals side by side, and a failure for every test that
# passes on gloo but not on chorus unless tests/torch/suite/known_differences.txt lists it with
# its reason. On torch 2.x also the group tests at 8 ranks (that suite skips them below 8).
# Results (one JSON per run) go to build/torch-suite/, build-torch26/torch-suite/ and
# build-torch-suite-VERSION/. 1-2 minutes per run on 2 cores (forked ranks, see run_suite.py),
# 14 runs by default.
#   CHORUS_SUITE_WORLD_SIZES="2 3"  CHORUS_SUITE_TORCH="1.13 2.6 2.15"  scripts/test_torch_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${CHORUS_SUITE_WORLD_SIZES:-2 3}
versions=${CHORUS_SUITE_TORCH:-1.13 2.6 2.15}
known=tests/torch/suite/known_differences.txt

# Runs the suite for each backend and world size, then compares; in the current environment.
# Arguments: the output directory, the python to run it with, and optionally a world size for
# the group tests alone (torch 2.x runs its *_group tests only from 8 ranks on).
run_all() {
  local out=$1 python=$2 group_size=${3:-} status=0 runs=()
  mkdir -p "$out"
  for n in $sizes; do runs+=("$n:"); done
  [ -z "$group_size" ] || runs+=("$group_size:_group")
  for run in "${runs[@]}"; do
    local n=${run%%:*} match=${run#*:} name
    for backend in gloo chorus; do
      name=${backend}_$n${match:+_group}
      echo "torch suite: $backend, world size $n${match:+, tests matching $match} -> $out/$name.json"
      "$python" tests/torch/suite/run_suite.py --backend "$backend" --world-size "$n" \
        ${match:+--match "$match"} --json "$out/$name.json" >"$out/$name.log" 2>&1 || true
      tail -n 1 "$out/$name.log"
    done
    "$python" tests/torch/suite/compare.py "$out/gloo_$n${match:+_group}.json" \
      "$out/chorus_$n${match:+_group}.json" --known "$known" || status=1
  done
  return $status
}

sudo=$([ "$(id -u)" = 0 ] || echo sudo)  # the 2.6 root needs chroot
status=0
for version in $versions; do
  case $version in
    1.13)
      ninja -C build
      CHORUS_PYTHONPATH=$PWD/build/python run_all build/torch-suite /usr/bin/python3 || status=1
      ;;
    2.6)
      # The function travels into the root as text: the root's bash runs it.
      $sudo scripts/test_torch26.sh bash -c "sizes='$sizes' known='$known'; $(declare -f run_all);
        run_all build-torch26/torch-suite python3 8" || status=1
      ;;
    [0-9]*.[0-9]*)
      # A torch from the package index, in its cached virtual environment (test_torch_venv.sh
      # builds chorus against it and puts the venv's python first on PATH).
      scripts/test_torch_venv.sh "$version" bash -c "sizes='$sizes' known='$known'; $(declare -f run_all);
        run_all build-torch-suite-$version python3 8" || status=1
      ;;
    *)
      echo "test_torch_suite: '$version' is not a torch version (1.13, 2.6 for Debian 13's, or a release on the package index)" >&2
      exit 2
      ;;
  esac
done
exit $status
