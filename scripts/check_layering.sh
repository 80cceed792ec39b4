#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fails if any folder includes a layer above it (docs/architecture.md, "Layers": core <- net <- store <- cpu|nccl <- capi),
# if src/ddp includes any internal header (it uses the public API only),
# if cpu and nccl include each other, if a folder of the CPU backend includes one it may not
# (the table cpu_layers below), if the cpu engine includes a transport's own headers rather
# than the transport seam, if public headers include anything but std and chorus
# public headers, or if tools/bench/examples reach past the public API.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
status=0

allowed_for() {
  case "$1" in
    src/core) echo "core" ;;
    src/net) echo "core net" ;;
    src/store) echo "core net store" ;;
    src/cpu) echo "core net store cpu" ;;
    src/nccl) echo "core net store nccl" ;;
    src/init|src/capi) echo "core net store cpu nccl init ddp capi" ;;
    # The DDP toolkit is built on the public API only (src/ddp/meson.build), as a user's
    # code would be: no internal layer at all, not even core.
    src/ddp) echo "" ;;
  esac
}

for dir in src/core src/net src/store src/cpu src/nccl src/init src/ddp src/capi; do
  [ -d "$dir" ] || continue
  allowed=$(allowed_for "$dir")
  while IFS= read -r line; do
    file=${line%%:*}
    # Parameter expansion, not a sed per line: src/ has hundreds of include lines, and a
    # process each made this check take most of its time limit on a loaded machine.
    layer=${line#*#include \"}
    layer=${layer%%/*}
    case " $allowed " in
      *" $layer "*) ;;
      *) echo "layering: $file includes \"$layer/...\" but $dir may include only: ${allowed:-public headers (<chorus/...>)}"; status=1 ;;
    esac
  done < <(grep -rHE '^#include "[a-z_]+/' "$dir" --include='*.hpp' --include='*.cpp' --include='*.h' || true)
done

# Inside the CPU backend (src/cpu), folder by folder: the one table of which folder may include
# from which (docs/architecture.md, "The CPU backend's layers"). Besides its own folder, a folder
# may include only the folders on its line; "*" is any. The floors it draws, top down:
#   cpu_process_group.cpp (the top: builds everything)
#   engine -> algorithms -> plan          plan: the vocabulary the others speak (schedules and
#   transports/<name> -> transports -> plan       their tasks, cost figures, memory keys and the
#   transports/socket -> bootstrap -> plan        one-sided capability)
# bootstrap forms groups (membership, handshake proofs, host ids, the agreed cost figures) and
# includes only the plan (for those figures); the socket transport's links (mesh, links on
# demand) are verified with the group's membership proofs, so transports/socket includes it.
# shm sets itself up over the socket mesh's control links and uses cma's peer-memory probe.
# A transport's own folder not listed takes the transports/* line; any other folder missing from
# the table fails the check: add it with its place.
cpu_layers='
(top)              *
engine             algorithms plan transports
algorithms         plan
plan
bootstrap          plan
transports         plan
transports/socket  transports plan bootstrap
transports/shm     transports plan transports/socket transports/cma
transports/*       transports plan
'
declare -A cpu_may
while read -r folder allowed; do
  [ -n "$folder" ] && cpu_may[$folder]=$allowed
done <<<"$cpu_layers"
while IFS= read -r line; do
  file=${line%%:*}
  from=${file#src/cpu/}
  from=${from%/*}
  [ "$from" = "${file#src/cpu/}" ] && from="(top)"
  to=${line#*#include \"cpu/}
  to=${to%\"*}
  to=${to%/*}
  [ "$to" = "$from" ] && continue
  row=$from
  if [ -z "${cpu_may[$row]+listed}" ] && [[ $row == transports/* ]] && [[ $row != transports/*/* ]]; then
    row='transports/*'
  fi
  if [ -z "${cpu_may[$row]+listed}" ]; then
    echo "layering: $file is in src/cpu/$from, which the table in scripts/check_layering.sh (cpu_layers) does not list: add the folder with the folders it may include"
    status=1
    continue
  fi
  allowed=${cpu_may[$row]}
  case " $allowed " in
    *" * "*|*" $to "*) ;;
    *) echo "layering: $file includes \"cpu/$to/...\", but src/cpu/$from may include only: ${allowed:-nothing outside its folder} (cpu_layers in scripts/check_layering.sh; an include up the floors makes a cycle)"; status=1 ;;
  esac
done < <(grep -rHE '^#include "cpu/' src/cpu --include='*.hpp' --include='*.cpp' --include='*.h' || true)

# The engine includes from cpu/transports/ only the seam headers (docs/adding-a-transport.md),
# never the stack builder (the table already keeps it out of every transport's folder), so no
# transport is named outside transports/ (and cpu_process_group.cpp, which builds the stack).
# The seam: transport.hpp, small_ops.hpp, wire.hpp, and any header added directly in
# transports/ for a capability; transport_stack.hpp and forwarding_transport.hpp are for those
# who build or write transports.
while IFS= read -r line; do
  file=${line%%:*}
  header=${line#*#include \"cpu/transports/}
  header=${header%%\"*}
  case "$header" in
    transport_stack.hpp|forwarding_transport.hpp)
      echo "layering: $file includes \"cpu/transports/$header\" but src/cpu/engine may include only the transport seam (cpu/transports/*.hpp: transport.hpp, small_ops.hpp, wire.hpp...): use a capability (transport.hpp)"
      status=1 ;;
  esac
done < <(grep -rHE '^#include "cpu/transports/' src/cpu/engine --include='*.hpp' --include='*.cpp' --include='*.h' || true)
# No algorithm posts a transfer itself: it adds tasks, which the executor posts and completes by
# token (a one-sided read or write too: read and write tasks, so that a transport whose transfers
# complete later fits).
while IFS= read -r line; do
  echo "layering: $line: src/cpu/algorithms may not post transfers (post_send/post_recv/post_read/post_write): add a task to the Schedule (send, recv, read, write)"; status=1
done < <(grep -rHnE '(->|\.)post_(send|recv|recv_reduce|read|write)\(' src/cpu/algorithms 2>/dev/null || true)
# Nor the SharedBuffer registry: the algorithms learn whether a peer's memory maps from the
# one-sided capability's keys (OneSided::mappable).
while IFS= read -r line; do
  echo "layering: $line: src/cpu/algorithms may not include the SharedBuffer registry: use OneSided::mappable"; status=1
done < <(grep -rHnE '^#include "core/shared_regions\.hpp"' src/cpu/algorithms 2>/dev/null || true)

# Public headers: std headers, chorus public headers, and <dlpack/dlpack.h> only where a user
# opted in (dlpack.hpp documents it). Never fmt, sockets, CUDA or NCCL.
while IFS= read -r line; do
  echo "public header: $line"; status=1
done < <(grep -HnE '^#include' include/chorus/*.hpp include/chorus/*.h 2>/dev/null |
  grep -vE '#include <(chorus/[a-z_0-9]+\.(hpp|h)|[a-z_0-9]+(\.h)?)>' |
  grep -vE '^include/chorus/dlpack\.hpp:.*<dlpack/dlpack\.h>')
while IFS= read -r line; do
  echo "public header includes a non-std system header: $line"; status=1
done < <(grep -HnE '^#include <(sys/|netinet/|arpa/|fmt/|cuda|nccl|unistd|pthread)' include/chorus/ 2>/dev/null -r)

# tools, bench and examples use chorus as a user does: public headers only. One exception:
# bench/bootstrap_perf.cpp drives cpu::join_group itself, as a rank's group setup does.
while IFS= read -r line; do
  echo "public-API-only folder reaches into src/: $line"; status=1
done < <(grep -rHnE '^#include "(core|net|store|cpu|nccl|init|ddp|capi)/' tools bench examples 2>/dev/null |
  grep -v '^bench/bootstrap_perf\.cpp:')

if [ "$status" = 0 ]; then
  echo "layering OK"
fi
exit "$status"
