#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Makes (once) a Debian 13 root with torch 2.6 and chorus's build dependencies, for the torch
# 2.6 test leg; prints its path. Cached: a second call finds the finished root and returns at
# once. Debian 12 has torch 1.13 only; the root gives a real torch 2.x on the same machine.
# Calls at the same time (`make test` starts one in the background early) take turns on a lock:
# the second waits for the first and then finds the root made.
#   CHORUS_TORCH26_ROOT  where the root lives (default ${XDG_CACHE_HOME:-~/.cache}/chorus/debian13-torch)
set -euo pipefail
root="${CHORUS_TORCH26_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/chorus/debian13-torch}"
stamp="$root/.chorus-root-complete"
packages=python3-torch,libtorch-dev,pybind11-dev,python3-dev,meson,ninja-build,pkg-config,g++,libfmt-dev,libssl-dev,nlohmann-json3-dev,libdlpack-dev,procps,ccache,gdb
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
  echo "$root"; exit 0
fi
if ! command -v debootstrap >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends debootstrap >&2
fi
rm -rf "$root"
# An interrupted run leaves no stamp, so the next call starts over from scratch.
# debootstrap's thousand lines go to a log that is shown only when it fails.
if ! debootstrap --variant=minbase --include="$packages" trixie "$root" http://deb.debian.org/debian \
  >"$root.log" 2>&1; then
  tail -n 40 "$root.log" >&2
  echo "torch26_root: debootstrap failed; full log in $root.log" >&2
  exit 1
fi
echo "$packages" >"$stamp"
echo "$root"
