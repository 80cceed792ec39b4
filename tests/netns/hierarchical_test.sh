#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Hierarchical allreduce on a network-namespace cluster: 2 namespaces ("hosts", each its own
# CHORUS_HOST_ID through netns_cluster.sh run) x 2 ranks. all_reduce_perf -c 1 from 8 B to
# 4 MiB (the latency and the pipelined phases) must be exact with the default choice (which is
# hierarchical for this layout, and shared memory inside each namespace), with it forced, and
# with the flat ring forced, for every op (-o all; avg stays flat). CHORUS_TRANSPORT=shm makes a
# failure to share memory inside a namespace an error rather than a fall back to tcp.
# Needs root and iproute2; exits 77 (skip) when namespaces are not permitted here.
# Env: BENCH_DIR (bench/ of the build), CHORUS_STORE_BIN; set by tests/netns/meson.build.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$src/scripts/netns_cluster.sh
"$cluster" check || exit $?
: "${BENCH_DIR:?set BENCH_DIR to bench/ of the build}"
: "${CHORUS_STORE_BIN:?set CHORUS_STORE_BIN to the chorus-store binary}"
export NETNS_CLUSTER=$cluster NETNS_RANKS_PER_HOST=2
# shellcheck source=/dev/null
source "$src/scripts/netns_ranks.sh"

readonly HOSTS=2 N=4 RANK_LIMIT_S=60
netns_cluster_up "$HOSTS" 4gbit

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
dump() { for ((r = 0; r < N; r++)); do sed "s/^/  [rank $r $1] /" "$work/rank$r.$1" >&2; done; }

netns_start_store "$CHORUS_STORE_BIN" "$work"
echo "cluster $CHORUS_NETNS_ID ($HOSTS hosts x 2 ranks), store $STORE_ADDR"
for algo in "" "allreduce=hierarchical" "allreduce=ring"; do
  CHORUS_TRANSPORT=shm CHORUS_ALGO=$algo CHORUS_TIMEOUT=30s CHORUS_RUN_ID="hier${algo//[=,]/-}" \
    netns_start_ranks "$N" "$work" "$RANK_LIMIT_S" \
    "$BENCH_DIR/all_reduce_perf" -b 8 -e 4M -f 8 -n 2 -w 1 -c 1 -o all
  if ! netns_wait_ranks; then
    fail "all_reduce_perf (CHORUS_ALGO='$algo'): exit codes ${RANK_RC[*]}"
    dump err
  elif ! grep -q 'Out of bounds values : 0 OK' "$work/rank0.out"; then
    fail "CHORUS_ALGO='$algo': rank 0 did not report 0 wrong values"
    dump out
  else
    echo "ok: all_reduce_perf -c 1 -o all, CHORUS_ALGO='$algo', 2 namespaces x 2 ranks"
  fi
done
[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all hierarchical checks passed"
