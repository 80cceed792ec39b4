#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the store protocol fuzz target (tests/store/fuzz_store_protocol.cpp) with clang's
# libFuzzer and AddressSanitizer, and runs it for a bounded time from the seed corpus.
# Usage: run_store_fuzz.sh SOURCE_ROOT BUILD_ROOT   (meson test store_fuzz passes both)
# Env:   CHORUS_FUZZ_SECONDS (default 60), CHORUS_FUZZ_RUNS (default 5000000), CXX_FUZZ (clang++)
# Exit 77 (meson: SKIP) with the reason when clang or its libFuzzer runtime is missing.
set -euo pipefail
src=${1:?source root}
build=${2:?build root}
seconds=${CHORUS_FUZZ_SECONDS:-60}
runs=${CHORUS_FUZZ_RUNS:-5000000}
out="$build/fuzz"
mkdir -p "$out"

cxx=${CXX_FUZZ:-}
if [ -z "$cxx" ]; then
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "SKIP: no clang++ found; install clang-14 and libclang-rt-14-dev (make deps) to fuzz the store protocol"
  exit 77
fi
probe="$out/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe"
if ! "$cxx" -fsanitize=fuzzer,address "$probe" -o "$out/probe" >"$out/probe.log" 2>&1; then
  echo "SKIP: $cxx cannot link libFuzzer (-fsanitize=fuzzer); install libclang-rt-14-dev (make deps)"
  sed 's/^/  /' "$out/probe.log" | head -5
  exit 77
fi

exe="$out/store_protocol_fuzz"
# The decoder and frame reader are compiled instrumented; the rest of the net and core layers
# they call (sockets, logging) comes from the static libraries of this build.
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address -DCHORUS_INTERNAL \
  -I"$src/include" -I"$src/src" -I"$build" -I"$build/include" -I"$build/src" \
  "$src/tests/store/fuzz_store_protocol.cpp" "$src/src/store/protocol.cpp" "$src/src/net/frame.cpp" \
  "$build/src/libchorus_net.a" "$build/src/libchorus_core.a" -lfmt -lpthread \
  -o "$exe"

corpus="$out/corpus"
rm -rf "$corpus"
mkdir -p "$corpus"
cp "$src"/tests/store/fuzz_corpus/* "$corpus"/
echo "fuzzing the store protocol decoder for at most ${seconds} s / ${runs} runs"
log="$out/fuzz.log"
rc=0
"$exe" "$corpus" -max_total_time="$seconds" -runs="$runs" -rss_limit_mb=1024 -timeout=10 \
  -max_len=65536 -print_final_stats=1 >"$log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL: the fuzzer found a crash, leak or hang (exit $rc); the input is saved as crash-*/leak-*"
  echo "in the current directory; replay it with: $exe FILE"
  tail -60 "$log"
  exit 1
fi
# Executions, coverage (cov: edges, ft: features) and corpus size of the last status line.
grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log"
