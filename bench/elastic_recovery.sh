#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# How fast an elastic job recovers (docs/elastic.md): examples/elastic_train on 4 ranks under
# chorusrun --elastic, rank 2 SIGKILLed before step 20 of 60, RUNS times; the medians of
#   shrink   kill -> step 20 done on the survivors' group (3 ranks)
#   rejoin   with --max-restarts 1: the replacement's process start -> state received, and
#            kill -> the first step done on the group of 4 again (steps of 20 ms)
# on loopback (one chorusrun, --standalone) and on a network-namespace cluster (4 "hosts" x 1
# rank at RATE, one chorusrun each, --nnodes 4; the same clock, so times across namespaces
# compare). The netns part needs root and iproute2 (skipped where namespaces are not permitted).
#
# Usage: bench/elastic_recovery.sh [RUNS] [RATE]     defaults: RUNS=7 RATE=1gbit
#   BUILD_DIR (default build) holds tools/chorusrun and examples/elastic_train.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
runs=${1:-7}
rate=${2:-1gbit}
build=${BUILD_DIR:-$root/build}
[[ $build = /* ]] || build=$root/$build
chorusrun=$build/tools/chorusrun
train=$build/examples/elastic_train
for b in "$chorusrun" "$train"; do
  [ -x "$b" ] || { echo "missing $b: ninja -C $build tools/chorusrun examples/elastic_train" >&2; exit 2; }
done
cluster=$root/scripts/netns_cluster.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
# ms values from the lines elastic_train prints: "... world W, X ms after rank R was killed".
after_kill() { sed -n "s/.* on world $1, \([0-9.]*\) ms after rank [0-9]* was killed/\1/p"; }
joined_ms() { sed -n 's/.* joined as rank .*, \([0-9.]*\) ms after it started/\1/p'; }
train_args=(--steps 60 --kill-at 2:20 --grace-ms 10000)
rejoin_args=(--step-ms 20 --rejoin-wait-ms 30000)

loopback() { # $1: extra chorusrun flags, rest: extra elastic_train flags
  local flags=$1
  shift
  # shellcheck disable=SC2086
  timeout -k 5 120 "$chorusrun" --elastic $flags --standalone -n 4 "$train" "${train_args[@]}" "$@" 2>&1
}

netns() { # the same on 4 namespaces, one chorusrun each
  local flags=$1
  shift
  local master ifname port=29621 pids=() node
  master=$("$cluster" addr 0)
  ifname=$("$cluster" ifname)
  for node in 0 1 2 3; do
    # shellcheck disable=SC2086
    "$cluster" run "$node" env CHORUS_SOCKET_IFNAME="$ifname" CHORUS_TIMEOUT=60s \
      CHORUS_STORE_TOKEN=elastic-recovery-bench-token \
      timeout -k 5 120 "$chorusrun" --elastic $flags --nnodes 4 --node-rank "$node" -n 1 \
      --master-addr "$master" --master-port "$port" "$train" "${train_args[@]}" "$@" \
      >"$work/node$node.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  cat "$work"/node*.out
}

measure() { # $1: loopback|netns
  local where=$1 i out
  : >"$work/shrink" && : >"$work/joined" && : >"$work/back"
  for ((i = 0; i < runs; i++)); do
    out=$("$where" "")
    after_kill 3 <<<"$out" >>"$work/shrink"
    out=$("$where" "--max-restarts 1" "${rejoin_args[@]}")
    joined_ms <<<"$out" >>"$work/joined"
    after_kill 4 <<<"$out" >>"$work/back"
  done
  printf '%-9s %5d %22s %26s %30s\n' "$where" "$runs" "$(median <"$work/shrink")" \
    "$(median <"$work/joined")" "$(median <"$work/back")"
}

printf '# elastic_train, 4 ranks, rank 2 killed before step 20 of 60; medians in ms, %s\n' \
  "$(date -u +%FT%TZ)"
printf '%-9s %5s %22s %26s %30s\n' where runs "kill->step on 3 ranks" "joiner start->state" \
  "kill->step on 4 again (20 ms steps)"
measure loopback
if "$cluster" check >/dev/null 2>&1; then
  CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$cluster" up 4 "$rate")
  export CHORUS_NETNS_ID
  trap '"$cluster" down "$CHORUS_NETNS_ID"; rm -rf "$work"' EXIT
  echo "# netns cluster $CHORUS_NETNS_ID: 4 namespaces, links $rate"
  measure netns
else
  echo "# netns: skipped ($("$cluster" check 2>&1 | tail -1))"
fi
