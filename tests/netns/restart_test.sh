#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Multi-node restarts on a network-namespace cluster: 2 "hosts" x 2 ranks, one chorusrun per
# namespace (node 0's hosts the store on its namespace address), running examples/ddp_train
# with a checkpoint per epoch. Rank 3 (node 1) crashes once at the start of epoch 2: both
# chorusruns must restart every node's ranks together (restart 1 of 1), the job must resume from
# its checkpoint, end with the weights of an uninterrupted run on all 4 ranks, and both
# chorusruns must exit 0. Needs root and iproute2; exits 77 (skip) where namespaces are not
# permitted. Env: CHORUSRUN, DDP_TRAIN (set by tests/netns/meson.build).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$src/scripts/netns_cluster.sh
"$cluster" check || exit $?
: "${CHORUSRUN:?set CHORUSRUN to the chorusrun binary}"
: "${DDP_TRAIN:?set DDP_TRAIN to the ddp_train example}"
readonly LIMIT_S=120 # each chorusrun is killed after this (a hang is a failure)

work=$(mktemp -d)
CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$cluster" up 2 1gbit)
export CHORUS_NETNS_ID
cleanup() {
  "$cluster" down "$CHORUS_NETNS_ID"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

master=$("$cluster" addr 0)
ifname=$("$cluster" ifname)
port=29611
pids=()
for node in 0 1; do
  "$cluster" run "$node" env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
    CHORUS_SOCKET_IFNAME="$ifname" CHORUS_TIMEOUT=60s \
    timeout -k 5 "$LIMIT_S" "$CHORUSRUN" --nnodes 2 --node-rank "$node" -n 2 \
    --master-addr "$master" --master-port "$port" --max-restarts 1 --prefix \
    "$DDP_TRAIN" --verify --resume "$work" --crash-once 3:2 >"$work/node$node.out" 2>&1 &
  pids+=($!)
done
rc=()
for p in "${pids[@]}"; do
  if wait "$p"; then rc+=(0); else rc+=($?); fi
done

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
all=$(cat "$work/node0.out" "$work/node1.out")
[ "${rc[0]}" = 0 ] && [ "${rc[1]}" = 0 ] || fail "chorusrun exit codes: node 0 ${rc[0]}, node 1 ${rc[1]}"
grep -q 'rank 3: crashing on purpose at the start of epoch 2' "$work/node1.out" ||
  fail "rank 3 did not crash as rehearsed"
# Every node restarts for the first failure any node reported: rank 3's exit, or, on a busy
# machine, that of a rank that saw rank 3's connection drop and exited first; then that rank's
# own error names rank 3.
for node in 0 1; do
  reason=$(grep -m1 -o "node $node: restarting every node's ranks (restart 1 of 1): .*" \
    "$work/node$node.out" | sed 's/.*(restart 1 of 1): //')
  if [ -z "$reason" ]; then
    fail "node $node did not restart"
  elif [[ $reason != "node 1: rank 3 "* ]]; then
    first=$(sed -n 's/^node [01]: rank \([0-9]\) .*/\1/p' <<<"$reason")
    grep -q "\[rank $first\] ddp_train: .*rank 3 " <<<"$all" ||
      fail "node $node restarted for \"$reason\", neither rank 3's failure nor a rank that names it"
  fi
done
grep -q "ddp_train.ckpt: 2 epoch(s) done (restart 1)" "$work/node0.out" ||
  fail "the second attempt did not resume from the epoch-2 checkpoint"
ok=$(grep -c 'full-batch weights| = .* OK' <<<"$all" || true)
[ "$ok" = 4 ] || fail "$ok of 4 ranks ended with the uninterrupted run's weights"
if [ "$failures" -gt 0 ]; then
  for node in 0 1; do sed "s/^/  [node $node] /" "$work/node$node.out" >&2; done
  exit 1
fi
echo "ok: 2 nodes x 2 ranks, rank 3 crashed once, both nodes restarted together and resumed"
grep -h "restarting every node" "$work/node0.out" "$work/node1.out"
