#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Allreduce busbw on a network-namespace cluster with rate-limited links, against the link rate
# and against iperf3 on the same links in the same session (DESIGN.md, "What fast means":
# target busbw >= 0.9 of line rate). A ring allreduce sends and receives 2(n-1)/n of the buffer
# per rank, so its busbw is bounded by the per-link rate.
#
# Usage: bench/netns_allreduce.sh [RATE] [N] [REPEATS] [-- all_reduce_perf flags]
#   defaults: RATE=1gbit N=4 REPEATS=3, flags: -b 1M -e 64M -f 4 -n 5 -w 2
#   WIRES (default "off"): all_reduce_perf --wire values, e.g. WIRES="off bf16"; each repeat runs
#   every one of them in turn, and each gets its busbw median and ratios (busbw counts the
#   data's float32 bytes, so a 16-bit wire can reach twice the link's ceiling).
#   BUILD_DIR (default build-netns) holds bench/all_reduce_perf and tools/chorus-store.
# Needs root, iproute2 and iperf3 (Debian packages iproute2, iperf3). Exits 77 when network
# namespaces are not permitted. All traffic stays inside the cluster's namespaces.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rate=${1:-1gbit}
n=${2:-4}
repeats=${3:-3}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" != -- ] || shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-b 1M -e 64M -f 4 -n 5 -w 2)
build=${BUILD_DIR:-$root/build-netns}
[[ $build = /* ]] || build=$root/$build
bench_bin=$build/bench/all_reduce_perf
store_bin=$build/tools/chorus-store
for b in "$bench_bin" "$store_bin"; do
  [ -x "$b" ] || { echo "missing $b: ninja -C $build bench/all_reduce_perf tools/chorus-store" >&2; exit 2; }
done
command -v iperf3 >/dev/null || { echo "iperf3 not found: apt-get install iperf3" >&2; exit 2; }

cluster=$root/scripts/netns_cluster.sh
"$cluster" check
export NETNS_CLUSTER=$cluster # read by netns_ranks.sh
# shellcheck source=/dev/null
source "$root/scripts/netns_ranks.sh"

netns_cluster_up "$n" "$rate"

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
link_gbs=$(awk -v r="$(echo "$rate" | tr "[:upper:]" "[:lower:]")" 'BEGIN {
  n = r + 0; u = substr(r, length(n "") + 1)
  m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1
  printf "%.6f", n * m / 8 / 1e9 }')

printf '# netns cluster %s: %d namespaces, links %s (%.4f GB/s each way), %s\n' \
  "$CHORUS_NETNS_ID" "$n" "$rate" "$link_gbs" "$(date -u +%FT%TZ)"

# iperf3 between namespaces 0 and 1, one stream, 5 s, REPEATS times (receiver GB/s).
a1=$("$cluster" addr 1)
for ((k = 0; k < repeats; k++)); do
  "$cluster" run 1 timeout 30 iperf3 -s -1 -B "$a1" -p 5201 >/dev/null 2>&1 &
  srv=$!
  out=""
  # The server needs a moment to listen: retry the client (bounded) instead of sleeping blindly.
  for _ in $(seq 50); do
    if out=$("$cluster" run 0 timeout 20 iperf3 -c "$a1" -p 5201 -t 5 -f m 2>/dev/null); then break; fi
    out=""
    sleep 0.1
  done
  wait "$srv" 2>/dev/null || true
  awk '/receiver/ {v=$(NF-2)} END {printf "%.6f\n", v / 8 / 1000}' <<<"$out" >>"$work/iperf"
done
iperf_gbs=$(median <"$work/iperf")
printf '# iperf3 ns0 -> ns1 (GB/s, %d runs): %s  median %s = %.3f of link rate\n' "$repeats" \
  "$(tr '\n' ' ' <"$work/iperf")" "$iperf_gbs" "$(awk -v a="$iperf_gbs" -v b="$link_gbs" 'BEGIN {print a / b}')"

netns_start_store "$store_bin" "$work"
echo "# store $STORE_ADDR in namespace 0"
read -r -a wires <<<"${WIRES:-off}"
for ((k = 0; k < repeats; k++)); do
  for wire in "${wires[@]}"; do
    # Each launch is a job of its own (its own run id): a launch that shared the previous one's
    # would meet that launch's keys in the store.
    CHORUS_RUN_ID="netns-$$-$k-$wire" netns_start_ranks "$n" "$work" 600 "$bench_bin" "${flags[@]}" \
      --wire "$wire" --json "$work/run$k-$wire.json"
    if ! netns_wait_ranks; then
      echo "all_reduce_perf --wire $wire failed (exit codes ${RANK_RC[*]}); stderr of each rank:" >&2
      for ((r = 0; r < n; r++)); do sed "s/^/[rank $r] /" "$work/rank$r.err" >&2; done
      exit 1
    fi
    echo "# ---- run $((k + 1)) of $repeats, wire $wire (rank 0's table) ----"
    cat "$work/rank0.out"
    # busbw at the largest size: the better of out-of-place and in-place.
    python3 - "$work/run$k-$wire.json" >>"$work/busbw-$wire" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
big = max(r["size"] for r in rows)
print(max(r[h]["busbw_gbs"] for r in rows if r["size"] == big for h in ("out_of_place", "in_place") if r.get(h)))
EOF
  done
done
for wire in "${wires[@]}"; do
  bus=$(median <"$work/busbw-$wire")
  printf '# wire %s: allreduce busbw at the largest size (GB/s, %d runs): %s median %s\n' "$wire" \
    "$repeats" "$(tr '\n' ' ' <"$work/busbw-$wire")" "$bus"
  printf '# wire %s: busbw / link rate = %.3f   busbw / iperf3 = %.3f   (target >= 0.9 of line rate; a 16-bit wire: up to 2)\n' \
    "$wire" "$(awk -v a="$bus" -v b="$link_gbs" 'BEGIN {print a / b}')" \
    "$(awk -v a="$bus" -v b="$iperf_gbs" 'BEGIN {print a / b}')"
done
