# SPDX-License-Identifier: BSD-3-Clause
# Sourced by scripts/update_abi_baseline.sh and tests/public/check_abi.sh: how libabigail reads
# libchorus.so, the same way for the baseline and the check. Only the interfaces the library
# exports, only types defined in the public headers (include/chorus), and nothing that depends
# on where the tree lives (paths, line numbers), so that every worktree writes the same file.
# shellcheck shell=bash
abi_read_flags() {
  local headers=$1
  printf '%s\n' --exported-interfaces-only --headers-dir "$headers" --drop-private-types \
    --no-corpus-path --no-comp-dir-path --no-show-locs --type-id-style hash
}
