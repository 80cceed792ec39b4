#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# DDP step time on a network-namespace cluster, one rank per namespace ("host"):
# chorus.torch.bf16_wire_hook (chorus, a bfloat16 wire between hosts, float32 sums) against
# torch's bf16_compress_hook (on the chorus group: torch 1.13's gloo has no bfloat16), DDP's
# own averaging on chorus, torch's fp16_compress_hook on gloo and plain DDP on gloo, the DDP
# copies taking turns in one job (bench/torch_ddp_step.py --variants). Prints the slowest
# rank's median step of each. Extra environment (CHORUS_ALGO, ...) reaches the ranks.
#
# Usage: bench/netns_ddp_wire.sh [RATE] [HOSTS] [GRADS_MIB] [ROUNDS]
#   defaults: 1gbit 4 64 4. BUILD_DIR (default build) holds python/ (the torch backend) and
#   tools/chorus-store. Needs root, iproute2 and /usr/bin/python3 with torch; exits 77 where
#   namespaces are not permitted. All traffic stays inside the cluster's namespaces.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rate=${1:-1gbit}
hosts=${2:-4}
grads=${3:-64}
rounds=${4:-4}
build=${BUILD_DIR:-$root/build}
[[ $build = /* ]] || build=$root/$build
[ -d "$build/python/chorus" ] || { echo "missing $build/python/chorus: build with the torch backend" >&2; exit 2; }
store_bin=$build/tools/chorus-store
[ -x "$store_bin" ] || { echo "missing $store_bin" >&2; exit 2; }

cluster=$root/scripts/netns_cluster.sh
"$cluster" check
export NETNS_CLUSTER=$cluster
# shellcheck source=/dev/null
source "$root/scripts/netns_ranks.sh"
netns_cluster_up "$hosts" "$rate"
printf '# netns cluster %s: %d hosts x 1 rank, links %s, %s\n' "$CHORUS_NETNS_ID" "$hosts" "$rate" \
  "$(date -u +%FT%TZ)"

# chorus ranks bootstrap through torch's store (env://) on namespace 0; chorus-store is not used.
master=$("$cluster" addr 0)
ifname=$("$cluster" ifname)
STORE_ADDR=unused
netns_start_ranks "$hosts" "$work" 900 env MASTER_ADDR="$master" MASTER_PORT=29511 \
  GLOO_SOCKET_IFNAME="$ifname" PYTHONPATH="$build/python" \
  /usr/bin/python3 "$here/torch_ddp_step.py" --variants wire,chorus_bf16,ddp,gloo_fp16,gloo \
  --grads-mib "$grads" --rounds "$rounds"
if ! netns_wait_ranks; then
  echo "torch_ddp_step.py failed (exit codes ${RANK_RC[*]}); stderr of each rank:" >&2
  for ((r = 0; r < hosts; r++)); do sed "s/^/[rank $r] /" "$work/rank$r.err" >&2; done
  exit 1
fi
cat "$work/rank0.out"
