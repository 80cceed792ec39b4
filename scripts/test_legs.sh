#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make test`: the six legs (unit, torch26, torchnew, asan, tsan, format), scheduled for a 2-core
# machine.
# Compiling is most of the CPU time and a test run is mostly waiting (sockets, timeouts, forked
# ranks), so the builds run one after another, each on both cores, and each leg's tests start
# as soon as its own build is done, alongside the next build. The builds are not niced: the
# tests must pass beside other builds and two CPU hogs anyway, and a niced build on a busy
# machine (a tenth of a hog's share) starved every leg behind it. Order: unit (the longest
# test run, so it overlaps the most), then torch26, torchnew, asan, tsan (the shortest test
# run last: nothing overlaps it).
#
# Each step's output goes to test-logs/LEG-STEP.log and is printed whole when the step ends, so
# legs never interleave; a failed step is named in the table at the end, which gives every step's
# result, wall and CPU seconds (CPU: the step's processes, user + system). Every leg runs even
# when another one failed; the exit status is 1 if any step failed.
#   MAKE=make scripts/test_legs.sh     (the Makefile's `test` target runs it)
set -u
cd "$(dirname "$0")/.."
make_cmd=${MAKE:-make}
logs=test-logs
rm -rf "$logs"
mkdir -p "$logs"
start=$SECONDS

# Runs one step (a make target) with its output in its log; writes "STATUS WALL CPU" to
# LOG.result. `times` in the subshell reports the CPU of the processes it waited for.
run_step() {
  local name=$1 niceness=$2 target=$3
  local log="$logs/$name.log"
  (
    t0=$SECONDS
    nice -n "$niceness" $make_cmd --no-print-directory "$target" >"$log" 2>&1
    status=$?
    wall=$((SECONDS - t0))
    # Second line of `times`: children's user and system time, as "XmY.ZZZs XmY.ZZZs". Into a
    # file, not a pipe or $(...): those run `times` in a new subshell, whose children are none.
    times >"$log.times"
    cpu=$(awk 'NR == 2 {
      n = split($0, f, /[ms ]+/); s = 0
      for (i = 1; i + 1 <= n; i += 2) if (f[i] != "") s += f[i] * 60 + f[i + 1]
      printf "%d", s }' "$log.times")
    rm -f "$log.times"
    echo "$status $wall $cpu" >"$log.result"
  )
}

# Prints a finished step's log whole, between two marker lines.
show_step() {
  local name=$1
  local log="$logs/$name.log"
  read -r status wall cpu <"$log.result"
  local verdict=ok
  [ "$status" = 0 ] || verdict="FAILED (exit $status)"
  echo "===== $name: $verdict, ${wall} s wall, ${cpu} s CPU (at $((SECONDS - start)) s) ====="
  cat "$log"
  echo "===== end of $name ====="
}

# Background test steps: a name each, printed as soon as it ends (polled between builds and at
# the end), in the order they end.
pending=()
show_finished() {
  local rest=() name
  for name in "${pending[@]}"; do
    if [ -f "$logs/$name.log.result" ]; then show_step "$name"; else rest+=("$name"); fi
  done
  pending=("${rest[@]}")
}
start_tests() {
  local leg=$1
  run_step "$leg-tests" 0 "test-$leg" &
  pending+=("$leg-tests")
}

run_step format 0 format-check &
pending+=(format)

for leg in unit torch26 torchnew asan tsan; do
  echo "----- $leg: building (at $((SECONDS - start)) s)"
  run_step "$leg-build" 0 "build-$leg"
  show_finished
  show_step "$leg-build"
  read -r status _ <"$logs/$leg-build.log.result"
  if [ "$status" = 0 ]; then
    echo "----- $leg: tests started (at $((SECONDS - start)) s)"
    start_tests "$leg"
  fi
done
while [ "${#pending[@]}" -gt 0 ]; do
  wait -n
  [ $? != 127 ] || break   # no child left: a step that ended without a result
  show_finished
done
show_finished

# What failed, in a few lines per failed step, next to the table: a CI log cut to its tail still
# names every failure (each step's whole output is above).
digest=""
for log in "$logs"/*.log; do
  [ -f "$log.result" ] || continue
  read -r status _ <"$log.result"
  [ "$status" = 0 ] && continue
  # meson's failed tests, a torch case's FAIL line and the two after it (its reason), sanitizer
  # summaries, ninja's failed commands and compiler errors.
  lines=$(awk '/^(FAIL|TIMEOUT|ERROR) / { n = 3 }
    n > 0 || /^ *[0-9]+\/[0-9]+ .* (FAIL|TIMEOUT|ERROR) |SUMMARY: |^FAILED:|: error: |^format: / { print; n-- }' \
    "$log" | head -n 16)
  digest+=$'\n'"$(basename "$log" .log):"$'\n'"${lines:-  (no failure line recognised: see its output above)}"
done
if [ -n "$digest" ]; then
  echo
  echo "make test: what failed (each step's whole output is above)${digest}"
fi

echo
echo "make test: every leg, in $((SECONDS - start)) s"
printf '%-14s %-22s %8s %8s\n' step result "wall s" "CPU s"
failed=0
for step in format unit-build unit-tests torch26-build torch26-tests torchnew-build torchnew-tests \
  asan-build asan-tests tsan-build tsan-tests; do
  if [ ! -f "$logs/$step.log.result" ]; then
    # Tests are not started after a failed build (already counted); anything else lost its result.
    build_status=1
    [ -f "$logs/${step%-tests}-build.log.result" ] && read -r build_status _ <"$logs/${step%-tests}-build.log.result"
    if [ "$step" != "${step%-tests}" ] && [ "$build_status" != 0 ]; then
      printf '%-14s %-22s\n' "$step" "not run (build failed)"
    else
      printf '%-14s %-22s\n' "$step" "FAILED (no result)"
      failed=1
    fi
    continue
  fi
  read -r status wall cpu <"$logs/$step.log.result"
  verdict=ok
  if [ "$status" != 0 ]; then verdict="FAILED (exit $status)"; failed=1; fi
  printf '%-14s %-22s %8s %8s\n' "$step" "$verdict" "$wall" "$cpu"
done
if [ "$failed" != 0 ]; then
  echo "make test: FAILED; each failed step's output is above, between its ===== lines"
  exit 1
fi
echo "make test: every leg passed"
