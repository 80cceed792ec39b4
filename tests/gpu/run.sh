#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU check of chorus, for a machine with a CUDA device and CUDA + NCCL installed (default
# /usr/local/cuda; override with CUDA_HOME). It configures a fresh build with -Dnccl=enabled,
# builds, runs the nccl tests and a one-GPU all_reduce_perf (world size 1: no launcher
# needed), all within five minutes (override with GPU_CHECK_BUDGET seconds), and prints a
# summary. Exit status 0 only if every step passed.
#
#   tests/gpu/run.sh                 # from anywhere; the build goes to <repo>/build-gpu
#   BUILD_DIR=/tmp/b tests/gpu/run.sh
set -u -o pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
build=${BUILD_DIR:-$repo/build-gpu}
budget=${GPU_CHECK_BUDGET:-300}
jobs=$(nproc 2>/dev/null || echo 4)
start=$SECONDS
summary=()
failed=0

remaining() { echo $((budget - (SECONDS - start))); }

# step NAME CMD...: runs CMD bounded by what is left of the budget; records the outcome.
step() {
  local name=$1
  shift
  local left
  left=$(remaining)
  if ((left <= 5)); then
    summary+=("SKIP  $name (out of time: the ${budget}s budget is spent)")
    failed=1
    return 1
  fi
  echo
  echo "=== $name (at most ${left}s)"
  echo "+ $*"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$left" "$@" || rc=$?
  local took=$((SECONDS - t0))
  if ((rc == 0)); then
    summary+=("PASS  $name (${took}s)")
  elif ((rc == 124 || rc == 137)); then
    summary+=("FAIL  $name (killed after ${took}s: the time budget ran out)")
    failed=1
  else
    summary+=("FAIL  $name (exit $rc after ${took}s)")
    failed=1
  fi
  return $rc
}

print_summary() {
  echo
  echo "=== chorus GPU check summary ($((SECONDS - start))s of ${budget}s; build dir $build)"
  local line
  for line in "${summary[@]}"; do
    echo "  $line"
  done
  if ((failed == 0)); then
    echo "  RESULT: all GPU checks passed"
  else
    echo "  RESULT: some GPU checks failed or were skipped (see above)"
  fi
}
trap print_summary EXIT

echo "=== environment"
echo "repo: $repo"
echo "cuda: $cuda"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || true
else
  echo "nvidia-smi not found (the driver may still work; the tests will say)"
fi
missing=()
for tool in meson ninja c++ pkg-config timeout; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[[ -f $cuda/include/nccl.h ]] || missing+=("$cuda/include/nccl.h")
[[ -f $cuda/include/cuda_runtime_api.h ]] || missing+=("$cuda/include/cuda_runtime_api.h")
if ((${#missing[@]} > 0)); then
  summary+=("FAIL  prerequisites: missing ${missing[*]} (install them, or set CUDA_HOME)")
  failed=1
  exit 1
fi
summary+=("PASS  prerequisites (meson $(meson --version), NCCL header in $cuda)")

# Debug logs of NCCL help when a step fails; WARN keeps the output short otherwise.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# One host only: keep NCCL's bootstrap sockets on loopback.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

rm -rf "$build"
step "configure (-Dnccl=enabled)" meson setup "$build" "$repo" -Dnccl=enabled \
  -Dcudatoolkit_dir="$cuda" -Dbuildtype=release || exit 1

# Everything, continuing past failures (-k 0), so that one broken corner does not hide the
# nccl results; the nccl test binaries are checked separately below.
step "build (everything, -j$jobs)" ninja -C "$build" -k 0 -j"$jobs"

for bin in test_nccl_stub test_nccl_unit test_nccl_gpu; do
  if [[ ! -x $build/tests/$bin ]]; then
    summary+=("FAIL  $bin was not built (see the build step)")
    failed=1
    continue
  fi
  # Run directly, not through meson: exit 77 (no GPU visible) is a failure on this machine.
  step "$bin" "$build/tests/$bin" --durations yes
  rc=$?
  if ((rc == 77)); then
    summary+=("  ^ $bin exited 77: it found no usable CUDA device (check CUDA_VISIBLE_DEVICES and the driver)")
  fi
done

# Split across ranks needs two GPUs (one per rank): run it directly where there are two; with
# one GPU it exits 77 (and meson, below, reports SKIP).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ((gpus >= 2)) && [[ -x $build/tests/test_nccl_gpu_multi ]]; then
  step "test_nccl_gpu_multi ($gpus GPUs)" "$build/tests/test_nccl_gpu_multi" --durations yes
fi

# The same tests through meson, as CI runs them (logs in $build/meson-logs/testlog.txt).
step "meson test --suite nccl" meson test -C "$build" --no-rebuild --print-errorlogs --suite nccl

perf=$build/bench/all_reduce_perf
if [[ -x $perf ]]; then
  # No launcher environment: world size 1 on the current GPU.
  step "all_reduce_perf --backend nccl (1 GPU, 8 B .. 128 MiB)" \
    "$perf" -b 8 -e 128M -f 2 -g 1 --backend nccl
else
  summary+=("SKIP  all_reduce_perf: $perf was not built (bench/ missing or failed to build)")
fi

((failed == 0))
