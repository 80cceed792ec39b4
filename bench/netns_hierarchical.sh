#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Hierarchical against flat allreduce on a network-namespace cluster: HOSTS namespaces ("hosts")
# with PER ranks each, rate-limited links, all_reduce_perf at one size, the flat ring
# (CHORUS_ALGO=allreduce=ring) and the default (hierarchical: shared memory inside a host, a
# ring of one rank per host across) alternating, REPEATS times each. Prints both busbw medians
# and their ratio. A flat ring of n ranks pushes 2(n-1)/n of the buffer through each host link
# per direction, the hierarchical one 2(h-1)/h: for 2 hosts x 2 ranks the limit is 1.5x.
#
# Usage: bench/netns_hierarchical.sh [RATE] [HOSTS] [PER] [REPEATS] [SIZE]
#   defaults: 1gbit 2 2 3 64M. BUILD_DIR (default build) holds bench/all_reduce_perf and
#   tools/chorus-store. Needs root and iproute2; exits 77 where namespaces are not permitted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rate=${1:-1gbit}
hosts=${2:-2}
per=${3:-2}
repeats=${4:-3}
size=${5:-64M}
n=$((hosts * per))
build=${BUILD_DIR:-$root/build}
[[ $build = /* ]] || build=$root/$build
bench_bin=$build/bench/all_reduce_perf
store_bin=$build/tools/chorus-store
for b in "$bench_bin" "$store_bin"; do
  [ -x "$b" ] || { echo "missing $b: ninja -C $build bench/all_reduce_perf tools/chorus-store" >&2; exit 2; }
done

cluster=$root/scripts/netns_cluster.sh
"$cluster" check
export NETNS_CLUSTER=$cluster NETNS_RANKS_PER_HOST=$per
# shellcheck source=/dev/null
source "$root/scripts/netns_ranks.sh"

netns_cluster_up "$hosts" "$rate"

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
printf '# netns cluster %s: %d hosts x %d ranks, links %s, allreduce %s float32, %s\n' \
  "$CHORUS_NETNS_ID" "$hosts" "$per" "$rate" "$size" "$(date -u +%FT%TZ)"
netns_start_store "$store_bin" "$work"

# run LABEL ALGO_ENV: one all_reduce_perf launch; appends the out-of-place busbw to LABEL's file.
# Every launch is its own job, so it gets its own run id: launches that share one meet the
# previous launch's keys in the store, and hierarchical runs after a flat run then stall for
# about 0.2 s (docs/results.md, "Hierarchical allreduce on two namespaces").
launches=0
run() {
  local label=$1 algo=$2
  launches=$((launches + 1))
  CHORUS_RUN_ID="netns-hier-$$-$launches" CHORUS_ALGO=$algo netns_start_ranks "$n" "$work" 600 env CHORUS_ALGO="$algo" "$bench_bin" \
    -b "$size" -e "$size" -n 3 -w 1 -c 1 --json "$work/$label.json"
  if ! netns_wait_ranks; then
    echo "all_reduce_perf ($label) failed (exit codes ${RANK_RC[*]}); stderr of each rank:" >&2
    for ((r = 0; r < n; r++)); do sed "s/^/[rank $r] /" "$work/rank$r.err" >&2; done
    exit 1
  fi
  python3 - "$work/$label.json" >>"$work/$label.busbw" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
print(rows[-1]["out_of_place"]["busbw_gbs"])
PY
}
for ((k = 0; k < repeats; k++)); do
  run flat "allreduce=ring"
  run hier ""
done
flat=$(median <"$work/flat.busbw")
hier=$(median <"$work/hier.busbw")
printf '# flat ring busbw (GB/s): %s median %s\n' "$(tr '\n' ' ' <"$work/flat.busbw")" "$flat"
printf '# hierarchical busbw (GB/s): %s median %s\n' "$(tr '\n' ' ' <"$work/hier.busbw")" "$hier"
printf '# hierarchical / flat = %.3f (limit %.3f)\n' "$(awk -v a="$hier" -v b="$flat" 'BEGIN {print a / b}')" \
  "$(awk -v n="$n" -v h="$hosts" 'BEGIN {print (2 * (n - 1) / n) / (2 * (h - 1) / h)}')"
