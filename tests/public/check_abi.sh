#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fails when libchorus.so's ABI differs from the baseline of the project's version
# (tests/public/abi/libchorus-<version>.abi): a public class's layout, a public function's
# signature, or the list of exported symbols changed (added ones too: programs built against
# the new library would not load the old one). Either undo the change, or bump the version in
# meson.build and run scripts/update_abi_baseline.sh.
#   check_abi.sh <libchorus.so> <source root> <version>
set -u
lib=$1 root=$2 version=$3
command -v abidiff >/dev/null || { echo "abidiff not found: apt-get install abigail-tools"; exit 77; }
# shellcheck source=scripts/abi_flags.sh
. "$root/scripts/abi_flags.sh"
baseline=$root/tests/public/abi/libchorus-$version.abi
fix="bump the version in meson.build (project(... version:)) and run scripts/update_abi_baseline.sh, then commit the new baseline"
if [ ! -f "$baseline" ]; then
  echo "no ABI baseline for version $version ($baseline): $fix"
  exit 1
fi
# No --headers-dir filtering on this side: with it, abidiff 2.2 let a public class's layout
# change through (a member added to ddp::DistributedSampler passed). The baseline is already
# restricted to what the exported interfaces reach, and abidiff's own harmless-change filters
# stay on. --exported-interfaces-only reads only the types the exported symbols reach, as the
# baseline was written (a quarter of the CPU time; a member added to DistributedSampler is still
# reported).
abidiff --exported-interfaces-only --no-show-locs "$baseline" "$lib"
rc=$?
if [ "$rc" = 0 ]; then
  echo "ABI OK: libchorus.so matches the $version baseline"
  exit 0
fi
if [ $((rc & 3)) != 0 ]; then
  echo "abidiff failed to compare (exit $rc)"
  exit 1
fi
echo
echo "libchorus.so's ABI changed without a version bump (abidiff exit $rc; above: what changed)."
echo "Keep public class layouts and the exported symbols as they are, or $fix."
exit 1
