#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# chorus against torch's gloo on a network-namespace cluster: HOSTS namespaces ("hosts") with PER
# ranks each, links shaped to RATE, float32 sum allreduce in place at the sizes BEGIN, BEGIN x
# FACTOR, ... END. Each of REPEATS rounds runs, one launch after the other so that all of them
# see the same machine: (a) chorus's all_reduce_perf (the default algorithm: hierarchical when a
# host has several ranks), (b) torch.distributed with backend gloo (bench/torch_allreduce_perf.py
# --worker in every namespace, env:// on namespace 0's address, GLOO_SOCKET_IFNAME = the
# namespace's link), and (c) torch.distributed with backend chorus when chorus.torch imports
# (from CHORUS_PYTHONPATH, default BUILD_DIR/python). Prints, per size, each one's busbw median (nccl-tests: algbw x 2(n-1)/n,
# n = every rank) and chorus / gloo, and per launch its wall time, the CPU its ranks used (user
# and system seconds, start-up and `import torch` included: every rank is a child of this script)
# and the machine's CPU split over the launch (/proc/stat: user, system, softirq, idle), so a
# CPU-bound run shows as such.
#
# Times: all_reduce_perf's in-place half with -z 2 (wait after each op, as torch's all_reduce
# does) and -a 3 (slowest rank): the per-op median over -n ITERS ops (JSON median_us; the row
# "chorus-avg" is the table's average time instead, which one stall on a busy machine moves);
# torch: the slowest rank's median over batches of ops (torch_allreduce_perf.py). A ring through every rank (gloo) pushes
# 2(n-1)/n of the buffer through each host link per direction, the hierarchical allreduce
# 2(h-1)/h: on 8 hosts x 2 ranks chorus's bound is 1.07x gloo's, when both are link-bound.
#
# Usage: bench/netns_vs_gloo.sh [RATE] [HOSTS] [PER] [REPEATS] [BEGIN] [END]
#   defaults: 1gbit 8 2 3 8M 64M. RATE: a tc rate or "none" (unshaped). Environment:
#   BUILD_DIR (default build: bench/all_reduce_perf, tools/chorus-store, python/ for (c)),
#   FACTOR (8), ITERS (all_reduce_perf -n, 10), CHECK (all_reduce_perf -c, 1), TORCH_REPEATS
#   (torch batches of 256 MiB / size ops, at least 3, at most 100: 3),
#   TORCH_PYTHON (/usr/bin/python3, with torch), CHORUS_TORCH (auto | 0 | 1: run (c)),
#   CHORUS_PYTHONPATH (where `import chorus.torch` is found, default BUILD_DIR/python),
#   LAUNCH_TIMEOUT (s per launch, 600), PERF_DIR (record `perf record -a -g` per launch there).
#   Needs root and iproute2; exits 77 where namespaces are not permitted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rate=${1:-1gbit}
hosts=${2:-8}
per=${3:-2}
repeats=${4:-3}
begin=${5:-8M}
end=${6:-64M}
factor=${FACTOR:-8}
iters=${ITERS:-10}
check=${CHECK:-1}
torch_repeats=${TORCH_REPEATS:-3}
py=${TORCH_PYTHON:-/usr/bin/python3}
limit=${LAUNCH_TIMEOUT:-600}
n=$((hosts * per))
build=${BUILD_DIR:-$root/build}
[[ $build = /* ]] || build=$root/$build
bench_bin=$build/bench/all_reduce_perf
store_bin=$build/tools/chorus-store
worker=$here/torch_allreduce_perf.py
pypath=${CHORUS_PYTHONPATH:-$build/python}
for b in "$bench_bin" "$store_bin"; do
  [ -x "$b" ] || { echo "missing $b: ninja -C $build bench/all_reduce_perf tools/chorus-store" >&2; exit 2; }
done
"$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
  { echo "$py has no torch with gloo (Debian: apt-get install python3-torch; or set TORCH_PYTHON)" >&2; exit 2; }
chorus_torch=${CHORUS_TORCH:-auto}
if [ "$chorus_torch" = auto ]; then
  chorus_torch=0
  PYTHONPATH=$pypath "$py" -c 'import chorus.torch' 2>/dev/null && chorus_torch=1
elif [ "$chorus_torch" = 1 ]; then
  PYTHONPATH=$pypath "$py" -c 'import chorus.torch' ||
    { echo "CHORUS_TORCH=1 but $pypath has no importable chorus.torch" >&2; exit 2; }
fi

cluster=$root/scripts/netns_cluster.sh
"$cluster" check
export NETNS_CLUSTER=$cluster NETNS_RANKS_PER_HOST=$per
# shellcheck source=/dev/null
source "$root/scripts/netns_ranks.sh"

netns_cluster_up "$hosts" "$rate"

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# The CPU seconds of this script's waited-for children (every rank once its launch is waited
# for), from /proc/self/stat's cutime and cstime, and the machine's /proc/stat line.
child_cpu() { awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print $14 / hz, $15 / hz}' "/proc/$$/stat"; }
# fields: user+nice system iowait irq softirq idle steal (jiffies)
machine_cpu() { awk '$1 == "cpu" {print $2 + $3, $4, $6, $7, $8, $5, $9}' /proc/stat; }

printf '# netns cluster %s: %d hosts x %d ranks, links %s, allreduce %s..%s (x%s) float32 sum in place, %s\n' \
  "$CHORUS_NETNS_ID" "$hosts" "$per" "$rate" "$begin" "$end" "$factor" "$(date -u +%FT%TZ)"
printf '# load average at start: %s\n' "$(uptime | sed 's/.*load average: //')"
printf '# chorus through torch (c): %s\n' "$([ "$chorus_torch" = 1 ] && echo yes || echo "no ($pypath has no importable chorus.torch)")"
netns_start_store "$store_bin" "$work"
master_addr=$("$cluster" addr 0)
ifname=$("$cluster" ifname)

launches=0
# launch LABEL CMD...: one launch of n ranks; on failure prints every rank's stderr and exits.
# Every launch gets its own run id (netns_hierarchical.sh: launches that share one meet the
# previous launch's keys) and its own MASTER_PORT. Prints the launch's CPU line.
launch() {
  local label=$1 r t0 t1 c0 c1 m0 m1 perf_pid=
  shift
  launches=$((launches + 1))
  if [ -n "${PERF_DIR:-}" ]; then
    mkdir -p "$PERF_DIR"
    timeout -s INT "$((limit + 30))" perf record -a -g -F 499 -q -o "$PERF_DIR/$label-$launches.data" \
      >/dev/null 2>&1 &
    perf_pid=$!
  fi
  t0=$(date +%s.%N) c0=$(child_cpu) m0=$(machine_cpu)
  CHORUS_RUN_ID="netns-vs-gloo-$$-$launches" netns_start_ranks "$n" "$work" "$limit" env \
    MASTER_ADDR="$master_addr" MASTER_PORT=$((29500 + launches)) GLOO_SOCKET_IFNAME="$ifname" \
    OMP_NUM_THREADS=1 "$@"
  local rc=0
  netns_wait_ranks || rc=$?
  t1=$(date +%s.%N) c1=$(child_cpu) m1=$(machine_cpu)
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  if [ "$rc" != 0 ]; then
    echo "$label failed (exit codes ${RANK_RC[*]}; 124/137: past LAUNCH_TIMEOUT=$limit s); stderr of each rank:" >&2
    for ((r = 0; r < n; r++)); do sed "s/^/[rank $r] /" "$work/rank$r.err" "$work/rank$r.out" >&2; done
    exit 1
  fi
  awk -v l="$label" -v k="$launches" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v m0="$m0" -v m1="$m1" 'BEGIN {
    split(c0, a, " "); split(c1, b, " "); split(m0, p, " "); split(m1, q, " ")
    tot = 0; for (i = 1; i <= 7; i++) { d[i] = q[i] - p[i]; tot += d[i] }
    w = t1 - t0
    printf "#   launch %d %s: %.1f s, ranks used %.1f s user + %.1f s system = %.2f cores;", k, l, w, b[1] - a[1], b[2] - a[2], (b[1] - a[1] + b[2] - a[2]) / w
    printf " machine: user %.0f%% system %.0f%% softirq %.0f%% irq %.0f%% idle %.0f%% steal %.0f%%\n", 100 * d[1] / tot, 100 * d[2] / tot, 100 * d[5] / tot, 100 * d[4] / tot, 100 * (d[6] + d[3]) / tot, 100 * d[7] / tot
  }'
}

# (a) chorus all_reduce_perf; appends "size busbw" lines (in-place half) to chorus.busbw (from
# the per-op median) and chorus-avg.busbw (from the average).
run_chorus() {
  launch chorus "$bench_bin" -b "$begin" -e "$end" -f "$factor" -n "$iters" -w 1 -c "$check" -z 2 -a 3 \
    --json "$work/chorus.json"
  "$py" - "$work/chorus.json" "$n" "$work/chorus.busbw" "$work/chorus-avg.busbw" <<'PY'
import json, sys
n = int(sys.argv[2])
with open(sys.argv[3], "a") as med, open(sys.argv[4], "a") as avg:
    for row in json.load(open(sys.argv[1]))["results"]:
        half = row["in_place"]
        print(row["size"], row["size"] / 1e9 / (half["median_us"] / 1e6) * 2 * (n - 1) / n, file=med)
        print(row["size"], half["busbw_gbs"], file=avg)
PY
}
# (b), (c) torch.distributed with BACKEND; rank 0 prints the rows; busbw as nccl-tests.
run_torch() {
  local backend=$1 label=$2
  launch "$label" env PYTHONPATH="$pypath" "$py" "$worker" --worker --backend "$backend" \
    -b "$begin" -e "$end" -f "$factor" -w 1 -r "$torch_repeats" --timeout "$limit"
  "$py" - "$work/rank0.out" "$n" >>"$work/$label.busbw" <<'PY'
import json, sys
n = int(sys.argv[2])
lines = [l for l in open(sys.argv[1]) if l.startswith("ROWS ")]
if not lines:
    sys.exit("rank 0 printed no ROWS line")
for row in json.loads(lines[-1][5:]):
    if row["wrong"]:
        sys.exit(f"{row['wrong']} wrong elements at {row['size']} B")
    print(row["size"], row["size"] / 1e9 / (row["time_us"] / 1e6) * 2 * (n - 1) / n)
PY
}

labels=(chorus chorus-avg gloo)
[ "$chorus_torch" = 1 ] && labels+=(chorus-torch)
for ((k = 0; k < repeats; k++)); do
  run_chorus
  run_torch gloo gloo
  [ "$chorus_torch" = 0 ] || run_torch chorus chorus-torch
done

printf '# load average at end: %s\n' "$(uptime | sed 's/.*load average: //')"
if [ "$rate" != none ]; then
  # Link bounds (GB/s busbw): a flat ring is bound at the link rate, the hierarchical
  # allreduce at rate x (2(n-1)/n) / (2(h-1)/h).
  printf '# link bound on busbw: ring %s, hierarchical %s\n' \
    "$(awk -v r="$rate" 'BEGIN {r = tolower(r); m = r ~ /gbit/ ? 1e9 : r ~ /mbit/ ? 1e6 : r ~ /kbit/ ? 1e3 : 1; printf "%.4f GB/s", r * m / 8e9}')" \
    "$(awk -v r="$rate" -v n="$n" -v h="$hosts" 'BEGIN {r = tolower(r); m = r ~ /gbit/ ? 1e9 : r ~ /mbit/ ? 1e6 : r ~ /kbit/ ? 1e3 : 1; printf "%.4f GB/s", r * m / 8e9 * ((n - 1) / n) / ((h - 1) / h)}')"
fi
printf '# %12s %-14s %-40s %s\n' size label "busbw per launch (GB/s)" median
declare -A med
while read -r size; do
  for label in "${labels[@]}"; do
    all=$(awk -v s="$size" '$1 == s {printf "%.4f ", $2}' "$work/$label.busbw")
    med[$label]=$(awk -v s="$size" '$1 == s {print $2}' "$work/$label.busbw" | median)
    printf '%14s %-14s %-40s %.4f\n' "$size" "$label" "$all" "${med[$label]}"
  done
  ratio() { awk -v a="${med[$1]}" -v b="${med[gloo]}" 'BEGIN {printf "%.3f", a / b}'; }
  printf '# %s B: chorus / gloo = %s' "$size" "$(ratio chorus)"
  [ "$chorus_torch" = 0 ] || printf ', chorus through torch / gloo = %s' "$(ratio chorus-torch)"
  printf '\n'
done < <(awk '{print $1}' "$work/chorus.busbw" | sort -un)
