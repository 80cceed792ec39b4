#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The flight recorder on a partition: 3 ranks in 3 namespaces run a long allreduce loop with
# CHORUS_TRACE_DIR set; rank 2's link is cut at the bridge. Every rank fails (the survivors
# time out naming rank 2; rank 2 loses both peers) and dumps; chorus-trace on the folder must
# single out rank 2 and show the survivors' last allreduces.
# Needs root and iproute2; exits 77 (skip) where namespaces are not permitted.
# Env: BENCH_DIR, CHORUS_STORE_BIN, CHORUS_TRACE_BIN (set by tests/netns/meson.build).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$src/scripts/netns_cluster.sh
"$cluster" check || exit $?
: "${BENCH_DIR:?}" "${CHORUS_STORE_BIN:?}" "${CHORUS_TRACE_BIN:?}"
export NETNS_CLUSTER=$cluster
# shellcheck source=/dev/null
source "$src/scripts/netns_ranks.sh"
readonly N=3 CUT_RANK=2

netns_cluster_up "$N" 4gbit

netns_start_store "$CHORUS_STORE_BIN" "$work"
mkdir "$work/trace"
mkfifo "$work/rank0.out"
# -z 1: each op waits for the previous one (its deadline runs from its issue).
CHORUS_TIMEOUT=3s CHORUS_TRACE_DIR=$work/trace CHORUS_RUN_ID=partition \
  netns_start_ranks "$N" "$work" 60 "$BENCH_DIR/all_reduce_perf" -b 1M -e 1M -n 1000000 -w 1 -c 0 -z 1
exec {out0}<"$work/rank0.out"
started=0
while read -r -t 30 -u "$out0" line; do
  if [[ $line =~ size.*count.*type ]]; then started=1; break; fi
done
[ "$started" = 1 ] || { echo "FAIL: the allreduce loop did not start within 30 s" >&2; exit 1; }
# Cut at once: the loop is under way (rank 0 prints its row only at the end).
"$cluster" cut "$CUT_RANK"
cat <&"$out0" >/dev/null &
netns_wait_ranks || true
exec {out0}<&-

report=$("$CHORUS_TRACE_BIN" --last 3 "$work/trace") || {
  echo "FAIL: chorus-trace found no dumps:" >&2
  ls -la "$work/trace" >&2
  cat "$work"/rank*.err >&2
  exit 1
}
echo "$report"
failures=0
grep -q "group 'world' (3 ranks): dumps from" <<<"$report" || { echo "FAIL: no world group" >&2; failures=1; }
# Which side fails first depends on timing (rank 2, cut off from both peers, or a survivor);
# either way both survivors' failures name rank 2, and chorus-trace says so.
grep -q "named by every other failed rank: rank $CUT_RANK " <<<"$report" ||
  { echo "FAIL: chorus-trace does not single out rank $CUT_RANK" >&2; failures=1; }
[ "$(grep -cE '^ +[01] +[0-9]+ allreduce +262144 x float32' <<<"$report")" -ge 2 ] ||
  { echo "FAIL: the survivors' last allreduces are not in the table" >&2; failures=1; }
exit "$failures"
