# shellcheck shell=bash
# SPDX-License-Identifier: BSD-3-Clause
# Sourced (bash) by bench/netns_allreduce.sh and tests/netns: starts a chorus-store and one rank
# per namespace of a cluster made by scripts/netns_cluster.sh (CHORUS_NETNS_ID must be set).
# Ranks get the plain env launcher variables, exactly what a user on N hosts would set.

NETNS_CLUSTER=${NETNS_CLUSTER:-$(dirname "${BASH_SOURCE[0]}")/netns_cluster.sh}

# netns_cluster_up HOSTS RATE: a cluster for this script (CHORUS_NETNS_ID, exported) and a
# scratch folder ($work); both are removed when the script exits (the EXIT trap is set here).
netns_cluster_up() {
  work=$(mktemp -d)
  CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$$ "$NETNS_CLUSTER" up "$1" "$2")
  export CHORUS_NETNS_ID
  trap netns_cluster_down EXIT
  trap 'exit 130' INT TERM HUP
}
netns_cluster_down() {
  "$NETNS_CLUSTER" down "$CHORUS_NETNS_ID"
  rm -rf "$work"
}

# netns_start_store BIN DIR: chorus-store on namespace 0's address, port 0. Sets STORE_ADDR
# (host:port) and STORE_PID. The port is read from the store's first line through a fifo (no
# polling); the fifo stays open for reading so the store never writes into a closed pipe.
netns_start_store() {
  local bin=$1 dir=$2 host line
  host=$("$NETNS_CLUSTER" addr 0)
  mkfifo "$dir/store.fifo"
  "$NETNS_CLUSTER" run 0 "$bin" --host "$host" --port 0 >"$dir/store.fifo" 2>"$dir/store.err" &
  STORE_PID=$!
  disown "$STORE_PID" # killed by the cluster's down; no "Killed" notice from the shell
  exec {STORE_FD}<"$dir/store.fifo"
  if ! read -r -t 15 -u "$STORE_FD" line || [[ ! $line =~ listening\ on\ .*:([0-9]+)$ ]]; then
    echo "chorus-store did not start within 15 s in namespace 0 (first line: '${line:-}'):" >&2
    cat "$dir/store.err" >&2
    return 1
  fi
  STORE_ADDR="$host:${BASH_REMATCH[1]}"
}

# netns_start_ranks N DIR LIMIT_S CMD...: rank r runs CMD in namespace r / PER_HOST (env
# NETNS_RANKS_PER_HOST, default 1: one rank per namespace), bounded by LIMIT_S (then SIGKILL
# 5 s later); stdout/stderr to DIR/rank<r>.{out,err}. Sets RANK_PIDS.
netns_start_ranks() {
  local n=$1 dir=$2 limit=$3 r ifname per=${NETNS_RANKS_PER_HOST:-1}
  shift 3
  ifname=$("$NETNS_CLUSTER" ifname)
  RANK_PIDS=()
  for ((r = 0; r < n; r++)); do
    "$NETNS_CLUSTER" run "$((r / per))" env RANK="$r" WORLD_SIZE="$n" LOCAL_RANK="$((r % per))" LOCAL_WORLD_SIZE="$per" \
      CHORUS_STORE_ADDR="$STORE_ADDR" CHORUS_RUN_ID="${CHORUS_RUN_ID:-netns-$$}" CHORUS_SOCKET_IFNAME="$ifname" \
      timeout -k 5 "$limit" "$@" >"$dir/rank$r.out" 2>"$dir/rank$r.err" &
    RANK_PIDS+=($!)
  done
}

# netns_wait_ranks: waits for every rank (each is bounded by its own timeout); returns the
# first non-zero exit status, and sets RANK_RC (one status per rank).
netns_wait_ranks() {
  local p rc first=0
  RANK_RC=()
  for p in "${RANK_PIDS[@]}"; do
    rc=0
    wait "$p" || rc=$?
    RANK_RC+=("$rc")
    [ "$first" != 0 ] || first=$rc
  done
  return "$first"
}
