#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fails if any folder includes a layer above it (docs/architecture.md, "Layers": core <- net <- store <- cpu|nccl <- capi),
# if src/ddp includes any internal header (it uses the public API only),
# if cpu and nccl include each other, if public headers include anything but std and chorus
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

# The collective algorithms reach other ranks only through the transport seam: no transport's
# own header (cma's process_vm_readv and mappings, shm's rings, sockets), no SharedBuffer
# registry. What they need is a capability of transport.hpp (OneSided).
while IFS= read -r line; do
  echo "layering: $line: src/cpu/algorithms may include only cpu/transports/transport.hpp of the transports"; status=1
done < <(grep -rHnE '^#include "(cpu/transports/[a-z_]+/|core/shared_regions\.hpp)' src/cpu/algorithms 2>/dev/null || true)

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
