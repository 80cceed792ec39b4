#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a chosen part of the meson suite in an already built dir and says how long it took.
#   scripts/run_tests.sh BUILD_DIR [--only "name ..."] [--skip "name ..."] [meson test options...]
# --only: just these tests (names missing from this build, e.g. a feature turned off, are left
# out and listed); --skip: every test but these. The sanitizer legs of `make test` use it.
# A ThreadSanitizer build runs under `setarch -R` (no ASLR) where the kernel allows it: on
# kernels with large vm.mmap_rnd_bits, TSan otherwise aborts with "unexpected memory mapping".
set -euo pipefail
build=$1
shift
only=""
skip=""
extra=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    # The tests scale their own hard bounds (watchdog, ranks' deadlines) alike.
    --timeout-multiplier) export CHORUS_TEST_TIME_SCALE=$2; extra+=("$1" "$2"); shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done

all=$(meson test -C "$build" --no-rebuild --list 2>/dev/null | sed -n 's|^[^ ]* / ||p')
names=()
if [ -n "$only" ]; then
  for t in $only; do
    if grep -qx "$t" <<<"$all"; then names+=("$t"); else echo "run_tests: $t is not in $build (not built there); left out"; fi
  done
else
  while IFS= read -r t; do
    case " $skip " in *" $t "*) echo "run_tests: skipping $t in $build" ;; *) names+=("$t") ;; esac
  done <<<"$all"
fi
if [ "${#names[@]}" -eq 0 ]; then
  echo "run_tests: no tests selected in $build" >&2
  exit 1
fi

wrap=()
sanitize=$(python3 -c 'import json, sys
opts = json.load(open(sys.argv[1] + "/meson-info/intro-buildoptions.json"))
print(next((o["value"] for o in opts if o["name"] == "b_sanitize"), "none"))' "$build")
if [ "$sanitize" = thread ]; then
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    wrap=(setarch "$(uname -m)" -R)
  fi
fi

start=$(date +%s)
status=0
"${wrap[@]}" meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 "${extra[@]}" "${names[@]}" || status=$?
echo "run_tests: $build: ${#names[@]} tests in $(( $(date +%s) - start )) s, exit $status"
exit $status
