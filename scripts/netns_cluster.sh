#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A throwaway "cluster" of Linux network namespaces joined by a bridge, with rate-limited links,
# for multi-host tests and benchmarks on one machine (DESIGN.md: network-namespace cluster).
#
#   netns_cluster.sh check                 exit 0 when namespaces can be made here, else 77 + why
#   netns_cluster.sh up N RATE             make N namespaces; prints the cluster id (chorus-<pid>)
#   netns_cluster.sh run I CMD...          run CMD inside namespace I (ip netns exec), with
#                                          CHORUS_HOST_ID naming the namespace as its host
#   netns_cluster.sh addr I                the IPv4 address of namespace I
#   netns_cluster.sh ifname                the name of each namespace's link (the same in all)
#   netns_cluster.sh cut I | heal I        take namespace I's link down / up at the bridge
#   netns_cluster.sh down [ID]             kill what runs inside and delete every namespace of ID
#   netns_cluster.sh with N RATE CMD...    up, run CMD with CHORUS_NETNS_ID set, then down (trap)
#   netns_cluster.sh gc                    down every chorus-<pid> cluster whose owner pid is gone
#
# RATE is a tc rate (100mbit, 1gbit, 2500mbit, ...) or "none" for unshaped links. Each link is
# shaped with tbf on the egress of both veth ends, so every namespace can send RATE and receive
# RATE at the same time, like a full-duplex NIC port on a switch.
#
# Layout of cluster ID (= chorus-<owner pid>; owner = $CHORUS_NETNS_OWNER, else the caller):
#   ID-br         the "switch": bridge br0 with one port p<i> per namespace, lo up
#   ID-<i>        rank namespace i: lo up, link chorus0 = 10.213.<owner % 250>.<i+1>/24
# The host's root namespace is never touched: every veth pair is created inside ID-br with its
# peer moved straight into ID-<i>. There is no default route anywhere, so the only reachable
# addresses are the cluster's own subnet and loopback. Commands other than run/with are bounded
# by `timeout`. run/cut/heal/addr/down take the cluster from $CHORUS_NETNS_ID.
# Needs root and iproute2 (Debian package iproute2); tbf (sch_tbf) for shaped links.
set -euo pipefail

readonly IFNAME=chorus0
readonly STEP_TIMEOUT=10 # seconds for any single ip/tc call

die() { echo "netns_cluster: $*" >&2; exit 1; }
ipx() { timeout "$STEP_TIMEOUT" ip "$@"; }
tcx() { timeout "$STEP_TIMEOUT" tc "$@"; }

# The id's owner pid, which also picks the third octet (parallel clusters are separate L2
# domains anyway; distinct subnets just make logs easier to tell apart).
owner_of() { local id=$1; echo "${id#chorus-}"; }
subnet_of() { echo "10.213.$(($(owner_of "$1") % 250))"; }

need_id() {
  [ -n "${CHORUS_NETNS_ID:-}" ] || die "CHORUS_NETNS_ID is not set: use the id that 'up' printed"
  [[ $CHORUS_NETNS_ID =~ ^chorus-[0-9]+$ ]] || die "CHORUS_NETNS_ID '$CHORUS_NETNS_ID' is not chorus-<pid>"
}

need_index() {
  [[ ${1:-} =~ ^[0-9]+$ ]] || die "namespace index must be a number, got '${1:-}'"
  ip netns list | awk '{print $1}' | grep -qx "$CHORUS_NETNS_ID-$1" ||
    die "namespace $CHORUS_NETNS_ID-$1 does not exist (cluster down, or index out of range)"
}

# Exit 77 (the test-skip code) with the reason when namespaces cannot be made here.
check() {
  if [ "$(id -u)" != 0 ]; then
    echo "netns_cluster: needs root (ip netns add, veth, tc); running as uid $(id -u)" >&2
    exit 77
  fi
  command -v ip >/dev/null || { echo "netns_cluster: 'ip' not found: apt-get install iproute2" >&2; exit 77; }
  command -v tc >/dev/null || { echo "netns_cluster: 'tc' not found: apt-get install iproute2" >&2; exit 77; }
  local probe="chorus-$$-probe" err
  if ! err=$(ipx netns add "$probe" 2>&1); then
    echo "netns_cluster: 'ip netns add' is not permitted here ($err); a container needs CAP_SYS_ADMIN and CAP_NET_ADMIN" >&2
    exit 77
  fi
  ipx netns del "$probe"
}

# Rate in bits/s from a tc rate string (bit, kbit, mbit, gbit; decimal multipliers, as tc).
rate_bps() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "RATE must look like 100mbit or 1gbit or 'none', got '$1'"
  local n=$((10#${BASH_REMATCH[1]}))
  [ "$n" -gt 0 ] || die "RATE must be above 0, got '$1' (use 'none' for unshaped links)"
  case ${BASH_REMATCH[2]} in
    bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;;
  esac
}

# tbf on one interface's egress. burst: 2 ms at RATE, at least 128 KiB so that a 64 KiB GSO
# packet fits in the bucket; the queue holds at most 20 ms (limits bufferbloat).
shape() {
  local ns=$1 dev=$2 rate=$3 bps burst
  bps=$(rate_bps "$rate")
  burst=$((bps / 8 / 500))
  [ "$burst" -ge 131072 ] || burst=131072
  tcx -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms ||
    die "tc tbf failed on $ns/$dev (is sch_tbf available in this kernel?)"
}

# Deletes every namespace of cluster $1, first killing what still runs inside (only processes
# in our own namespaces, which this script's callers started): a namespace with live processes
# would keep its interfaces after `ip netns del`.
destroy() {
  local id=$1 ns
  local -a pids
  [[ $id =~ ^chorus-[0-9]+$ ]] || die "refusing to delete '$id': not a chorus-<pid> cluster id"
  local all
  all=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$id-(br|[0-9]+)\$" || true)
  [ -n "$all" ] || return 0
  for ns in $all; do
    mapfile -t pids < <(timeout "$STEP_TIMEOUT" ip netns pids "$ns" 2>/dev/null || true)
    [ ${#pids[@]} = 0 ] || kill -KILL "${pids[@]}" 2>/dev/null || true
  done
  for ns in $all; do
    ipx netns del "$ns" 2>/dev/null || echo "netns_cluster: could not delete $ns" >&2
  done
}

up() {
  [ $# -eq 2 ] || die "usage: up N RATE"
  local n=$1 rate=${2,,}
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then die "N must be 1..200, got '$n'"; fi
  [ "$rate" = none ] || rate_bps "$rate" >/dev/null
  check
  local owner=${CHORUS_NETNS_OWNER:-$PPID}
  [[ $owner =~ ^[0-9]+$ ]] || die "CHORUS_NETNS_OWNER must be a pid, got '$owner'"
  local id="chorus-$owner" net br i ns
  net=$(subnet_of "$id")
  br="$id-br"
  if ip netns list | awk '{print $1}' | grep -qE "^$id-"; then
    die "cluster $id already exists (one cluster per owner pid; 'down' it first)"
  fi
  # A failure half-way leaves nothing behind (up_done is global: the trap runs after return).
  up_done=0
  trap '[ "$up_done" = 1 ] || destroy "'"$id"'"' EXIT
  trap 'exit 130' INT TERM HUP

  ipx netns add "$br"
  ipx -n "$br" link set lo up
  ipx -n "$br" link add br0 type bridge forward_delay 0
  ipx -n "$br" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns="$id-$i"
    ipx netns add "$ns"
    ipx -n "$ns" link set lo up
    ipx -n "$br" link add "p$i" type veth peer name "$IFNAME" netns "$ns"
    ipx -n "$br" link set "p$i" master br0
    ipx -n "$br" link set "p$i" up
    ipx -n "$ns" addr add "$net.$((i + 1))/24" dev "$IFNAME"
    ipx -n "$ns" link set "$IFNAME" up
    if [ "$rate" != none ]; then
      shape "$ns" "$IFNAME" "$rate" # namespace -> switch
      shape "$br" "p$i" "$rate"     # switch -> namespace
    fi
  done
  up_done=1
  echo "$id"
}

with() {
  [ $# -ge 3 ] || die "usage: with N RATE CMD..."
  local n=$1 rate=$2
  shift 2
  local owner=$$ rc=0
  CHORUS_NETNS_ID=$(CHORUS_NETNS_OWNER=$owner up "$n" "$rate")
  export CHORUS_NETNS_ID
  trap 'destroy "$CHORUS_NETNS_ID"' EXIT
  trap 'exit 130' INT TERM HUP
  "$@" || rc=$?
  exit "$rc"
}

gc() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^chorus-[0-9]+-br$' || true); do
    pid=${ns#chorus-}
    pid=${pid%-br}
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "netns_cluster: removing chorus-$pid (owner pid $pid is gone)" >&2
      destroy "chorus-$pid"
    fi
  done
}

cmd=${1:-}
shift || true
case $cmd in
  check) check ;;
  up) up "$@" ;;
  with) with "$@" ;;
  run)
    need_id; need_index "${1:-}"
    i=$1; shift
    [ $# -ge 1 ] || die "usage: run I CMD..."
    # Each namespace is a host: its ranks share memory with each other, never across.
    CHORUS_HOST_ID="$CHORUS_NETNS_ID-$i" exec ip netns exec "$CHORUS_NETNS_ID-$i" "$@"
    ;;
  addr) need_id; need_index "${1:-}"; echo "$(subnet_of "$CHORUS_NETNS_ID").$(($1 + 1))" ;;
  ifname) echo "$IFNAME" ;;
  cut) need_id; need_index "${1:-}"; ipx -n "$CHORUS_NETNS_ID-br" link set "p$1" down ;;
  heal) need_id; need_index "${1:-}"; ipx -n "$CHORUS_NETNS_ID-br" link set "p$1" up ;;
  down)
    if [ $# -ge 1 ]; then destroy "$1"; else need_id; destroy "$CHORUS_NETNS_ID"; fi
    ;;
  gc) gc ;;
  *)
    sed -n '3,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
