#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Lists the C/C++ sources that .clang-format governs (one per line, relative to the repo root):
# every *.c *.h *.cpp *.hpp under include/ src/ tools/ bench/ tests/ examples/. Shared by
# check_format.sh and format.sh. Uses git's file list when this is a git checkout (so build
# dirs and untracked scratch files are never touched), else find.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(include src tools bench tests examples)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files --cached --others --exclude-standard -- "${dirs[@]}" |
    grep -E '\.(c|h|cpp|hpp)$' | while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done
else
  find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) | sort
fi
