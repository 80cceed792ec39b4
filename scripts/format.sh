#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Formats in place, with clang-format 14 and the repo's .clang-format, the files
# scripts/check_format.sh checks (or only the files given as arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(scripts/clang_format_bin.sh)
if [ "$#" -gt 0 ]; then
  "$cf" -i --style=file "$@"
else
  scripts/format_files.sh | xargs -r -d '\n' "$cf" -i --style=file
fi
