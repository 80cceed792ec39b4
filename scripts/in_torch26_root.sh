#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command inside the Debian 13 root (torch 2.6) with this source tree at /chorus.
# Mounts live in a private mount namespace, so nothing is left mounted when the command ends.
#   scripts/in_torch26_root.sh ROOT COMMAND...
set -euo pipefail
root="$1"; shift
src="$(cd "$(dirname "$0")/.." && pwd)"
exec unshare --mount --propagation private -- bash -c '
  set -e
  root="$1"; src="$2"; shift 2
  mkdir -p "$root/chorus"
  mount --bind "$src" "$root/chorus"
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/tmp"
  exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 TMPDIR=/tmp "$@"
' bash "$root" "$src" "$@"
