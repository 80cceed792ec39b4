#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Peer liveness where no reset can arrive: 3 namespaces (scripts/netns_cluster.sh), one rank
# each, running a 64 MiB allreduce loop with the DEFAULT timeouts (CHORUS_TIMEOUT 10 min,
# CHORUS_PEER_TIMEOUT 10 s). Then, separately:
#   1. rank 2's link goes down at the switch;
#   2. rank 2's namespace drops every packet (nftables rule), when nft is installed;
#   3. the store's host (namespace 0) goes down while two clients wait on it;
#   4. during group setup, rank 2's host goes down after it published its address.
# Every survivor must fail within the peer timeout + 2 s, naming the silent rank (or the
# store's host), and no namespace may be left behind.
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
# The defaults are what is tested.
unset CHORUS_TIMEOUT CHORUS_PEER_TIMEOUT

readonly N=3
readonly SILENT=2
readonly PEER_TIMEOUT_S=10 # kDefaultPeerTimeout
readonly BOUND_S=$((PEER_TIMEOUT_S + 2))
readonly RANK_LIMIT_S=90 # each process is killed after this (a hang is a failure)

work=$(mktemp -d)
cleanup() {
  [ -z "${CHORUS_NETNS_ID:-}" ] || "$cluster" down "$CHORUS_NETNS_ID"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }
over() { awk -v e="$1" -v b="$2" 'BEGIN {exit !(e > b)}'; }

# A fresh cluster, store and allreduce loop; returns once the timed ops run (rank 0's column
# header is printed after every rank joined; its stdout is a fifo read here).
start_loop() {
  local id=$1 line
  CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$cluster" up "$N" 1gbit)
  export CHORUS_NETNS_ID
  rm -rf "${work:?}"/* && netns_start_store "$CHORUS_STORE_BIN" "$work"
  mkfifo "$work/rank0.out"
  CHORUS_RUN_ID=$id netns_start_ranks "$N" "$work" "$RANK_LIMIT_S" \
    "$BENCH_DIR/all_reduce_perf" -b 64M -e 64M -n 1000000 -w 1 -c 0 -z 1
  exec {OUT0}<"$work/rank0.out"
  while read -r -t 60 -u "$OUT0" line; do
    if [[ $line =~ size.*count.*type ]]; then return 0; fi
  done
  return 1
}

stop_loop() {
  exec {OUT0}<&-
  "$cluster" down "$CHORUS_NETNS_ID"
  CHORUS_NETNS_ID=
}

# expect_failure WHAT PID SINCE ERR PATTERN: process PID must exit non-zero within BOUND_S of
# SINCE (a time from now()), with a line matching PATTERN (grep -E) in the file ERR.
expect_failure() {
  local what=$1 pid=$2 t0=$3 err=$4 pattern=$5 rc=0 elapsed
  wait "$pid" || rc=$?
  elapsed=$(since "$t0")
  if [ "$rc" = 0 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$what: exited $rc (0: no failure; 124/137: hung until its ${RANK_LIMIT_S} s limit)"
  elif over "$elapsed" "$BOUND_S"; then
    fail "$what: failed ${elapsed} s after the cut; bound ${BOUND_S} s"
    sed 's/^/  | /' "$err" >&2
  elif ! grep -qE "$pattern" "$err"; then
    fail "$what: the error does not match '$pattern'"
    sed 's/^/  | /' "$err" >&2
  else
    echo "ok: $what: failed ${elapsed} s after the cut: $(grep -m1 -E "$pattern" "$err" | cut -c1-260)"
  fi
}

# Survivors 0 and 1 must fail within BOUND_S of $1 (the cut), naming rank SILENT as silent.
check_survivors() {
  local r
  for r in 0 1; do
    expect_failure "$2: rank $r" "${RANK_PIDS[$r]}" "$1" "$work/rank$r.err" \
      "no traffic or heartbeat from rank $SILENT "
  done
}

# 1. Link down.
if start_loop link; then
  "$cluster" cut "$SILENT"
  check_survivors "$(now)" "link down"
else
  fail "link down: the allreduce loop did not start within 60 s"
  cat "$work"/rank*.err >&2
fi
stop_loop

# 2. A firewall that drops everything in rank 2's namespace (no RST, no ICMP).
if command -v nft >/dev/null; then
  if start_loop drop; then
    "$cluster" run "$SILENT" nft -f - <<'EOF'
table inet chorus_drop {
  chain in { type filter hook input priority 0; policy drop; }
  chain out { type filter hook output priority 0; policy drop; }
}
EOF
    check_survivors "$(now)" "nft drop rule"
  else
    fail "nft drop rule: the allreduce loop did not start within 60 s"
  fi
  stop_loop
else
  echo "skipped: nft drop rule (nft is not installed: apt-get install nftables)"
fi

# 3. The store's host goes down while clients in namespaces 1 and 2 wait on it (default
# timeouts otherwise: a 10-minute wait).
CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$cluster" up "$N" 1gbit)
export CHORUS_NETNS_ID
rm -rf "${work:?}"/* && netns_start_store "$CHORUS_STORE_BIN" "$work"
pids=()
for r in 1 2; do
  "$cluster" run "$r" timeout -k 5 "$RANK_LIMIT_S" \
    "$CHORUS_STORE_BIN" --connect "$STORE_ADDR" --timeout 600 wait never \
    >"$work/client$r.out" 2>"$work/client$r.err" &
  pids+=($!)
done
# Cut only once both clients are connected (a client still connecting would retry until its
# 10-minute deadline: the host may come up later, as far as it knows). Its wait request
# follows the connection within a round trip. Bounded: 30 s.
for r in 1 2; do
  if ! timeout 30 bash -c "until '$cluster' run $r ss -Htn state established dst '$STORE_ADDR' | grep -q .; do :; done"; then
    fail "store host down: the client in namespace $r did not connect within 30 s"
    cat "$work/client$r.err" >&2
  fi
done
"$cluster" cut 0
cut_at=$(now)
for i in 0 1; do
  expect_failure "store host down: client $((i + 1))" "${pids[$i]}" "$cut_at" \
    "$work/client$((i + 1)).err" "no answer from the store's host"
done
"$cluster" down "$CHORUS_NETNS_ID"

# 4. Group setup: rank 2 publishes its address, then its host goes down before the others
# connect to it. They must name it within the peer timeout, not wait out the 10-minute setup.
CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$cluster" up "$N" 1gbit)
export CHORUS_NETNS_ID
rm -rf "${work:?}"/* && netns_start_store "$CHORUS_STORE_BIN" "$work"
ifname=$("$cluster" ifname)
start_rank() {
  "$cluster" run "$1" env RANK="$1" WORLD_SIZE=$N LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    CHORUS_STORE_ADDR="$STORE_ADDR" CHORUS_RUN_ID=setup CHORUS_SOCKET_IFNAME="$ifname" \
    timeout -k 5 "$RANK_LIMIT_S" "$BENCH_DIR/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 \
    >"$work/rank$1.out" 2>"$work/rank$1.err" &
  RANK_PIDS[$1]=$!
}
RANK_PIDS=()
start_rank 0
start_rank 2
disown "${RANK_PIDS[2]}" # never waited for; the cluster's down kills it
# Bounded wait (30 s) until rank 2 has claimed its rank (which publishes its address) and
# counted itself: the formation's `joined` counter reads 2 (ranks 0 and 2).
counted=
deadline=$(($(date +%s) + 30))
while [ -z "$counted" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  joined=$("$cluster" run 0 "$CHORUS_STORE_BIN" --connect "$STORE_ADDR" keys 2>/dev/null |
    grep '/joined$' | head -n 1) || true # not there yet
  if [ -n "$joined" ] &&
    [ "$("$cluster" run 0 "$CHORUS_STORE_BIN" --connect "$STORE_ADDR" add "$joined" 0 2>/dev/null || true)" = 2 ]; then
    counted=1
  fi
done
if [ -z "$counted" ]; then
  fail "setup: rank 2 did not claim its rank and count itself within 30 s"
  cat "$work/rank2.err" >&2
fi
"$cluster" cut "$SILENT"
start_rank 1
started=$(now)
for r in 0 1; do
  expect_failure "setup: rank $r" "${RANK_PIDS[$r]}" "$started" "$work/rank$r.err" \
    "rank $SILENT published its address .* but does not answer there"
done

trap - EXIT
id=$CHORUS_NETNS_ID
cleanup
if ip netns list | grep -q "^$id-"; then
  fail "namespaces left behind: $(ip netns list | grep "^$id-" | tr '\n' ' ')"
fi
[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all liveness checks passed"
