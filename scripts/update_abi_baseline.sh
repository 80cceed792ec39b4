#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Writes the ABI baseline of libchorus.so for the project version in meson.build:
# tests/public/abi/libchorus-<version>.abi (libabigail's abidw, from a default `meson setup`
# build: g++, debugoptimized, no sanitizer), and removes the baselines of other versions. Run
# it after bumping the version when a public class's layout or the exported symbols changed
# on purpose; the `abi` test (tests/public/check_abi.sh) then compares against the new file.
#   scripts/update_abi_baseline.sh [build-dir]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
command -v abidw >/dev/null || { echo "abidw not found: apt-get install abigail-tools" >&2; exit 1; }
# shellcheck source=scripts/abi_flags.sh
. "$root/scripts/abi_flags.sh"
version=$(sed -n "s/^  version: '\([0-9.]*\)',$/\1/p" "$root/meson.build" | head -1)
[ -n "$version" ] || { echo "no version: line found in $root/meson.build" >&2; exit 1; }
ninja -C "$build" src/libchorus.so.$version >/dev/null
lib=$build/src/libchorus.so.$version
dir=$root/tests/public/abi
mkdir -p "$dir"
mapfile -t flags < <(abi_read_flags "$root/include/chorus")
abidw "${flags[@]}" --out-file "$dir/libchorus-$version.abi" "$lib"
find "$dir" -name 'libchorus-*.abi' ! -name "libchorus-$version.abi" -print -delete
echo "wrote $dir/libchorus-$version.abi; commit it with the version bump"
