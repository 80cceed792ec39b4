#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Network-namespace cluster test: 3 namespaces joined by a bridge (scripts/netns_cluster.sh),
# one rank each, configured only by the env launcher variables, as on 3 hosts.
#   1. all_reduce_perf and all_gather_perf with -c 1 across the namespaces: exact results.
#   2. A rank's link is cut (bridge port down) during a long allreduce: the other ranks fail
#      with a TimeoutError that names that rank, within CHORUS_TIMEOUT=3s plus a bounded slack.
#   3. Every namespace is gone afterwards (also on failure: trap).
# Needs root and iproute2; exits 77 (skip) when namespaces are not permitted here.
# Env: BENCH_DIR (bench/ of the build), CHORUS_STORE_BIN; set by tests/netns/meson.build.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$src/scripts/netns_cluster.sh
"$cluster" check || exit $?
: "${BENCH_DIR:?set BENCH_DIR to bench/ of the build}"
: "${CHORUS_STORE_BIN:?set CHORUS_STORE_BIN to the chorus-store binary}"
export NETNS_CLUSTER=$cluster # read by netns_ranks.sh
# shellcheck source=/dev/null
source "$src/scripts/netns_ranks.sh"

readonly N=3
readonly CUT_RANK=2
readonly FAIL_TIMEOUT_S=3
# Upper bound from the cut to the survivors' exit: the op's deadline (at most FAIL_TIMEOUT_S
# after the cut), the status-probe grace (timeout/10, >= 100 ms) and process exit on a loaded
# 2-core machine.
readonly FAIL_BOUND_S=$((FAIL_TIMEOUT_S + 9))
readonly RANK_LIMIT_S=60 # each rank process is killed after this (a hang is a failure)

netns_cluster_up "$N" 4gbit

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
dump() { for ((r = 0; r < N; r++)); do sed "s/^/  [rank $r $1] /" "$work/rank$r.$1" >&2; done; }
now() { date +%s.%N; }

netns_start_store "$CHORUS_STORE_BIN" "$work"
echo "cluster $CHORUS_NETNS_ID, store $STORE_ADDR"

# 1. Exact collectives across the namespaces. Each run is its own job id (CHORUS_RUN_ID), so the
# shared long-lived store never hands one run the keys of another.
for b in all_reduce all_gather; do
  CHORUS_TIMEOUT=30s CHORUS_RUN_ID=$b netns_start_ranks "$N" "$work" "$RANK_LIMIT_S" \
    "$BENCH_DIR/${b}_perf" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1
  if ! netns_wait_ranks; then
    fail "$b across $N namespaces: exit codes ${RANK_RC[*]}"
    dump err
  elif ! grep -q 'Out of bounds values : 0 OK' "$work/rank0.out"; then
    fail "$b: rank 0 did not report 0 wrong values"
    dump out
  else
    echo "ok: ${b}_perf -c 1 on $N ranks in $N namespaces"
    grep -E '^ +[0-9]+ ' "$work/rank0.out" | tail -1
  fi
done

# 2. Cut rank CUT_RANK's link during a long allreduce. Rank 0's stdout is a fifo: the column
# header is printed after every rank has joined the group and just before the timed ops start.
# -z 1 waits for each op before issuing the next: an op's deadline runs from its issue, so a
# million ops issued at once with a 3 s timeout would time out in the queue without any cut.
rm -f "$work/rank0.out" && mkfifo "$work/rank0.out"
CHORUS_TIMEOUT=${FAIL_TIMEOUT_S}s CHORUS_RUN_ID=cut netns_start_ranks "$N" "$work" "$RANK_LIMIT_S" \
  "$BENCH_DIR/all_reduce_perf" -b 4M -e 4M -n 1000000 -w 1 -c 0 -z 1
exec {out0}<"$work/rank0.out"
started=0
while read -r -t 30 -u "$out0" line; do
  if [[ $line =~ size.*count.*type ]]; then started=1; break; fi
done
if [ "$started" != 1 ]; then
  fail "the long allreduce did not start within 30 s"
  dump err
else
  "$cluster" cut "$CUT_RANK"
  cut_at=$(now)
  survivors_ok=1
  for ((r = 0; r < N; r++)); do
    [ "$r" != "$CUT_RANK" ] || continue
    rc=0
    wait "${RANK_PIDS[$r]}" || rc=$?
    elapsed=$(awk -v a="$cut_at" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')
    err=$work/rank$r.err
    if [ "$rc" = 0 ]; then
      fail "rank $r exited 0 although rank $CUT_RANK's link was cut"; survivors_ok=0
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      fail "rank $r hung until its ${RANK_LIMIT_S} s limit after the cut"; survivors_ok=0
    elif awk -v e="$elapsed" -v b="$FAIL_BOUND_S" 'BEGIN {exit !(e > b)}'; then
      fail "rank $r failed ${elapsed} s after the cut, bound is ${FAIL_BOUND_S} s (CHORUS_TIMEOUT=${FAIL_TIMEOUT_S}s)"
      survivors_ok=0
    elif ! grep -q 'timed out' "$err" || ! grep -qE "rank $CUT_RANK\b[^;]*did not answer a status probe" "$err"; then
      fail "rank $r's error does not say that the op timed out and rank $CUT_RANK did not answer"
      survivors_ok=0
    else
      echo "ok: rank $r failed ${elapsed} s after the cut: $(grep -m1 'timed out' "$err" | cut -c1-300)"
    fi
  done
  [ "$survivors_ok" = 1 ] || dump err
  # The cut rank itself is bounded by the same timeout; down kills it if it is still there.
fi
exec {out0}<&-

# 3. Everything is removed.
trap - EXIT
netns_cluster_down
if ip netns list | grep -q "^$CHORUS_NETNS_ID-"; then
  fail "namespaces left behind: $(ip netns list | grep "^$CHORUS_NETNS_ID-" | tr '\n' ' ')"
else
  echo "ok: no namespace of $CHORUS_NETNS_ID left"
fi
[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all netns checks passed"
