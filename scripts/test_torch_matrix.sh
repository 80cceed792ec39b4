#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every supported torch minor from the package index (`make test-torch-matrix`), one after
# another:
#   scripts/test_torch_matrix.sh [VERSION...]      (default: $TORCH_MATRIX, 2.6 through 2.15)
# For each: its cached virtual environment (scripts/torch_venv.sh: a download of several GB the
# first time), chorus built against it (build-torch-VERSION; a torch wheel before 2.7 makes the
# build pre-C++11-ABI throughout), then tests/torch/run_torch_tests.py's "torch26" selection
# (every torch case, the suite_subset of torch's own distributed suite among them) and the
# "workloads_all" case (DDP variants, ZeRO, FSDP1/2, DTensor/TP, DCP, functional collectives
# at 2 and 4 ranks against gloo). A version that fails to install, build or test is a row of
# the table, and the next one runs. Prints the table at the end (markdown, for
# docs/results.md) and writes it to test-logs/torch-matrix.md with each version's log beside it.
# CHORUS_MATRIX_PRUNE=1 removes each venv after its run (the downloads stay cached in
# wheels/: a later run makes the venv again offline), for a disk that cannot hold them all.
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || read -r -a versions <<< "${TORCH_MATRIX:-2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15}"
root="${CHORUS_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/chorus}"
mkdir -p test-logs
table=test-logs/torch-matrix.md
rows=()
status=0
for version in "${versions[@]}"; do
  log="test-logs/torch-matrix-$version.log"
  start=$SECONDS
  scripts/test_torch_venv.sh "$version" bash -c 'python3 tests/torch/run_torch_tests.py --jobs 2 \
    torch26; a=$?; python3 tests/torch/run_torch_tests.py workloads_all; exit $((a | $?))' \
    > "$log" 2>&1
  code=$?
  wall=$((SECONDS - start))
  got=$(sed -n 's/^test-torch: torch \([^ ]*\) in .*/\1/p' "$log" | head -1)
  abi="C++11"
  [ -f "build-torch-$got/meson-logs/meson-log.txt" ] &&
    grep -q -- "-D_GLIBCXX_USE_CXX11_ABI=0" "build-torch-$got/build.ninja" 2> /dev/null && abi="pre-C++11"
  if ! grep -q "^test-torch: built" "$log"; then
    build="FAILED"
    tests="-" suite="-" workloads="-"
  else
    build="ok ($abi)"
    tests=$(sed -n 's/^\([0-9]* of [0-9]*\) torch cases passed.*/\1/p' "$log" | head -1)
    suite=$(grep -oE '^(PASS|FAIL|SKIP) suite_subset[^:]*' "$log" | head -1)
    workloads=$(grep -oE '^(PASS|FAIL|SKIP) workloads_all[^:]*' "$log" | head -1)
  fi
  rows+=("| ${got:-$version} | $build | ${tests:-?} | ${suite:-?} | ${workloads:-?} | $wall s |")
  [ $code = 0 ] || status=1
  echo "torch-matrix: torch ${got:-$version}: exit $code after $wall s ($log)"
  if [ "${CHORUS_MATRIX_PRUNE:-0}" = 1 ] && [ -n "$got" ]; then
    rm -rf "$root/torch-$got-"cp*[0-9]
  fi
done
{
  echo "| torch | build | torch cases passed (torch26 selection) | suite_subset | workloads_all | wall |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} > "$table"
cat "$table"
exit $status
