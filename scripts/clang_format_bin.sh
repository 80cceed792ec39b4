#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Prints the clang-format 14 to use ($CLANG_FORMAT, clang-format-14 or clang-format). Other major
# versions lay out some constructs differently, so a mismatch is an error, not a warning.
set -euo pipefail
for c in "${CLANG_FORMAT:-}" clang-format-14 clang-format; do
  [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 || continue
  if "$c" --version | grep -qE 'version 14\.'; then
    echo "$c"
    exit 0
  fi
  echo "$0: $c is not clang-format 14 ($("$c" --version)); set CLANG_FORMAT to a clang-format 14" >&2
  exit 2
done
echo "$0: clang-format 14 not found: apt-get install clang-format (Debian 12), or set CLANG_FORMAT" >&2
exit 2
