#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs the deliberate finding (racy_snippet) under this build's sanitizer and checks that the
# report is symbolized: a frame names racy_snippet.cpp and the line marked "finding (KIND)" in
# it, not "<null>" and a binary offset. Fails when the sanitizer reports nothing or cannot
# symbolize (no llvm-symbolizer where the options point: `make test` installs it).
#   check_report.sh PROGRAM SOURCE thread|address
set -uo pipefail
program=$1
source=$2
kind=$3
line=$(grep -n "// finding ($kind)" "$source" | cut -d: -f1)
if [ -z "$line" ]; then
  echo "check_report: no line marked 'finding ($kind)' in $source" >&2
  exit 1
fi
report=$("$program" 2>&1)
status=$?
echo "$report"
if [ "$status" = 0 ]; then
  echo "check_report: $program exited 0: the sanitizer found nothing" >&2
  exit 1
fi
if ! grep -q "racy_snippet.cpp:$line" <<<"$report"; then
  echo "check_report: no frame names racy_snippet.cpp:$line: the report is not symbolized" \
    "(is llvm-symbolizer installed and named by external_symbolizer_path?)" >&2
  exit 1
fi
echo "check_report: the report names racy_snippet.cpp:$line"
