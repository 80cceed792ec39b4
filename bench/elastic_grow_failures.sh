#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What a failed grow costs an elastic job (docs/elastic.md, "What grow guarantees"):
# examples/elastic_train on 3 ranks under chorusrun --elastic (40 steps of 100 ms, so 4 s when
# nothing fails), RUNS times each, the job's wall time in
#   deadmember  a process started by hand joins (CHORUS_ELASTIC_JOIN=1, the job's address, run
#               id and token) and rank 2 is SIGKILLed the moment rank 0 writes its seat
#   phantom     two tickets taken by hand (chorus-store add, with the job's token) after step 2,
#               0.5 s apart, by no joiner
#   arrived     the same, each with its arrival record written too (as a joiner that then
#               never forms, stopped or killed after taking its ticket, would leave them)
# and the first "growing after step ... failed" message. Loopback only; prints one line per run.
#
# Usage: bench/elastic_grow_failures.sh [RUNS]     default: RUNS=3
#   BUILD_DIR (default build) holds tools/chorusrun, tools/chorus-store and
#   examples/elastic_train.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
runs=${1:-3}
build=${BUILD_DIR:-$root/build}
[[ $build = /* ]] || build=$root/$build
chorusrun=$build/tools/chorusrun
store=$build/tools/chorus-store
train=$build/examples/elastic_train
for b in "$chorusrun" "$store" "$train"; do
  [ -x "$b" ] || {
    echo "missing $b: ninja -C $build tools/chorusrun tools/chorus-store examples/elastic_train" >&2
    exit 2
  }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CHORUS_STORE_TOKEN=grow-failures-token-0123456789abcdef

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

one_run() { # $1: deadmember or phantom, $2: run index
  local case=$1 port job rank2 c start end
  port=$(free_port)
  export CHORUS_RUN_ID=$case$2
  local lobby=run/$CHORUS_RUN_ID/attempt0/group/elastic/world
  local ask=("$store" --connect "127.0.0.1:$port" --timeout 30)
  start=$(date +%s.%N)
  "$chorusrun" --elastic --nnodes 1 -n 3 --master-addr 127.0.0.1 --master-port "$port" \
    "$train" --steps 40 --step-ms 100 --grace-ms 10000 > "$work/job" 2>&1 &
  job=$!
  "${ask[@]}" wait "run/$CHORUS_RUN_ID/attempt0/app/printed/2" > /dev/null
  if [ "$case" != deadmember ]; then
    local t
    for t in 1 2; do
      t=$("${ask[@]}" add "$lobby/tickets" 1)
      if [ "$case" = arrived ]; then "${ask[@]}" set "$lobby/arrived/$t" 1; fi
      sleep 0.5
    done
  else
    rank2=
    for c in $(ps -o pid= --ppid "$job"); do
      if tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx 'RANK=2'; then rank2=$c; fi
    done
    ( "${ask[@]}" wait "$lobby/seat/1" > /dev/null && kill -9 "$rank2" ) &
    CHORUS_STORE_ADDR=127.0.0.1:$port CHORUS_ELASTIC_JOIN=1 "$train" --steps 40 \
      > "$work/joiner" 2>&1 &
  fi
  local rc=0
  wait "$job" || rc=$?
  end=$(date +%s.%N)
  wait || true
  printf '%-10s run %d: exit %d, %.1f s, %d step lines; %s\n' "$case" "$2" "$rc" \
    "$(echo "$end - $start" | bc)" "$(grep -c 'step [0-9]* world' "$work/job")" \
    "$(grep -m1 -o 'growing after step [0-9]* failed: .\{0,200\}' "$work/job" || echo 'no grow failed')"
}

for case in deadmember phantom arrived; do
  for ((i = 1; i <= runs; i++)); do
    one_run "$case" "$i"
  done
done
