#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The loopback limits that tcp-backend numbers are compared against, measured in the same
# session as the benchmark (DESIGN.md, "What fast means"):
#   B1(n): iperf3 -P n      (one iperf3 process pair; iperf3 3.12 runs all streams in ONE thread)
#   Bp(n): n iperf3 pairs at once, summed (n sender and n receiver processes, like n ranks)
# A ring allreduce of S bytes pushes 2(n-1)S bytes through the kernel, so busbw <= B/n.
# Usage: bench/loopback_limits.sh [seconds-per-run] [n...]      (default: 5 s, n = 2 4)
# Traffic stays on 127.0.0.1. Needs iperf3 (Debian package iperf3).
set -euo pipefail
secs=${1:-5}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2 4)
command -v iperf3 >/dev/null || { echo "iperf3 not found: apt-get install iperf3" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs one client against a one-shot server; prints receiver Gbit/s.
run_pair() {
  local port=$1 streams=$2 out
  iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  local server=$!
  # The server needs a moment to listen; the client retries instead of sleeping blindly.
  for _ in $(seq 50); do
    if out=$(iperf3 -c 127.0.0.1 -p "$port" -P "$streams" -t "$secs" -f g 2>/dev/null); then break; fi
    out=""
    sleep 0.1
  done
  wait "$server" 2>/dev/null || true
  awk '/receiver/ {v=$(NF-2)} END {print v}' <<<"$out"
}

printf '# loopback limits, %s s per run, %s\n' "$secs" "$(date -u +%FT%TZ)"
printf '# %-4s %16s %16s %16s %16s\n' n 'B1 iperf3 -P n' 'Bp n pairs' 'B1/n (GB/s)' 'Bp/n (GB/s)'
for n in "${sizes[@]}"; do
  b1=$(run_pair "$(free_port)" "$n")
  tmp=$(mktemp -d)
  for i in $(seq "$n"); do
    run_pair "$(free_port)" 1 >"$tmp/$i" &
  done
  wait
  bp=$(cat "$tmp"/* | awk '{s+=$1} END {print s}')
  rm -rf "$tmp"
  awk -v n="$n" -v b1="$b1" -v bp="$bp" 'BEGIN {
    printf "  %-4d %11.2f Gb/s %11.2f Gb/s %16.3f %16.3f\n", n, b1, bp, b1/8/n, bp/8/n }'
done
