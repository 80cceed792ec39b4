#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fails (exit 1) if any C/C++ source under include/ src/ tools/ bench/ tests/ examples/ differs
# from what clang-format 14 makes of it with the repo's .clang-format; lists those files, the
# number of lines that would change, and the command that fixes them. Exit 2: no clang-format 14.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(scripts/clang_format_bin.sh)
bad=0
lines=0
while IFS= read -r f; do
  n=$("$cf" --style=file "$f" | diff "$f" - | grep -c '^<' || true)
  if [ "$n" -gt 0 ]; then
    echo "format: $f: $n line(s) differ from .clang-format"
    bad=$((bad + 1))
    lines=$((lines + n))
  fi
done < <(scripts/format_files.sh)
if [ "$bad" -gt 0 ]; then
  echo "format: $bad file(s), $lines line(s) not formatted; fix with: scripts/format.sh" \
       "(or: $cf -i --style=file FILE...)"
  exit 1
fi
echo "format: every source matches .clang-format"
