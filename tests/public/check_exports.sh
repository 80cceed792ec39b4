#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# libchorus.so must export only the C ABI (chorus_*) and the public C++ API (chorus::, minus
# internal namespaces), plus what C++ itself needs (typeinfo, vtables of exported classes).
# Nothing from fmt, std, or chorus::{net,store,tcp,nccl,capi,env,...} internals.
set -u
lib=$1
command -v nm >/dev/null || { echo "nm not found: install binutils"; exit 77; }
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^$')
[ -n "$syms" ] || { echo "no exported symbols in $lib?"; exit 1; }
bad=0
while IFS= read -r sym; do
  demangled=$(c++filt "$sym")
  case "$sym" in
    chorus_*) continue ;;  # the C ABI
  esac
  case "$demangled" in
    # Internal namespaces never leak.
    *chorus::net::*|*chorus::store::*|*chorus::cpu::*|*chorus::nccl::*|*chorus::capi::*|\
    *chorus::env::*|*chorus::init::*|*chorus::test::*|*"chorus::(anonymous namespace)"*|*fmt::*)
      echo "internal symbol exported: $demangled"; bad=1 ;;
    # Public C++ API, and the RTTI / vtables / thunks of exported classes.
    chorus::*|"typeinfo for chorus::"*|"typeinfo name for chorus::"*|"vtable for chorus::"*|\
    "non-virtual thunk to chorus::"*|"virtual thunk to chorus::"*|"guard variable for chorus::"*)
      ;;
    *)
      echo "non-chorus symbol exported: $sym ($demangled)"; bad=1 ;;
  esac
done <<<"$syms"
n=$(wc -l <<<"$syms")
if [ "$bad" = 0 ]; then
  echo "exports OK: $n symbols, all chorus_* or chorus:: public API"
fi
exit "$bad"
