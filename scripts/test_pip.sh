#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make test-pip`: chorus installed by pip, as a torch user installs it, into a virtual
# environment whose torch is not the system's.
#
#  1. A venv without system site-packages, holding a torch in the wheel layout made from the
#     system's (Debian's python3-torch + libtorch-dev): the package copied, headers under
#     torch/include and libraries under torch/lib (links to the files), typing_extensions
#     (what `import torch` needs) and meson-python (the build backend) linked in.
#  2. As root, the rest runs in a private mount namespace where the system's torch package
#     directory is an empty tmpfs: nothing can come from it. Everyone: the build's compile and
#     link lines must name the venv's torch and never the system's.
#  3. `pip install --no-build-isolation .` into the venv (timed); from another directory:
#     torch and chorus come from the venv, package_check.py (__version__ = meson.build's,
#     _C.pyi against _C, py.typed, python -m chorus.run), the tools in the venv's bin/ run
#     without LD_LIBRARY_PATH and load the package's libchorus.so.
#  4. tests/pip/ddp_check.py (DDP on chorus, parameters equal on every rank and to one
#     process) at 2 ranks under the venv's chorusrun, python -m chorus.run and
#     python -m torch.distributed.run.
#  5. `pip wheel --no-build-isolation .` (timed): the wheel holds the package, the library and
#     the tools, and no tests, benchmarks, examples, headers or static library; `pip uninstall`
#     removes every file; the wheel installs and imports.
# Costs one build of the library and the extension (minutes); scratch under $TMPDIR, removed.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"

if [ "${1:-}" = --inside ]; then
  work="$2"
  venv="$work/venv"
  py="$venv/bin/python"
  site="$($py -c 'import sysconfig; print(sysconfig.get_path("platlib"))')"
  sys_torch="$3"
  fail() { echo "test-pip: FAIL: $*" >&2; exit 1; }
  export USE_LIBUV=0 GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
  unset PYTHONPATH LD_LIBRARY_PATH CHORUS_PYTHON || true
  if [ -n "$(ls -A "$sys_torch" 2>/dev/null)" ]; then
    echo "test-pip: the system torch ($sys_torch) is visible (not root): relying on the build lines"
  else
    echo "test-pip: the system torch ($sys_torch) is hidden"
  fi

  t0=$SECONDS
  (cd "$src" && $py -m pip install --no-build-isolation --no-index --no-deps -q \
     --config-settings builddir="$work/build" .) > "$work/pip-install.log" 2>&1 \
    || { tail -40 "$work/pip-install.log"; fail "pip install"; }
  echo "test-pip: pip install --no-build-isolation . took $((SECONDS - t0)) s"

  # The build asked the venv's torch, never the system's.
  grep -q -- "-isystem$site/torch/include" "$work/build/compile_commands.json" \
    || fail "the compile lines do not name $site/torch/include"
  grep -q "$site/torch/lib/libtorch.so" "$work/build/build.ninja" \
    || fail "the link line does not name $site/torch/lib/libtorch.so"
  if grep -l "$sys_torch" "$work/build/compile_commands.json" "$work/build/build.ninja"; then
    fail "the build names the system torch $sys_torch"
  fi
  echo "test-pip: compile and link lines name $site/torch/{include,lib}, never $sys_torch"

  mkdir -p "$work/elsewhere"
  cd "$work/elsewhere"
  version="$(meson introspect --projectinfo "$work/build" | $py -c 'import json, sys; print(json.load(sys.stdin)["version"])')"
  CHORUS_VERSION="$version" CHORUS_CHORUSRUN="$venv/bin/chorusrun" \
    $py "$src/tests/torch/package_check.py" "$site/chorus" || fail "package_check.py"
  for tool in chorusrun chorus-store chorus-trace; do
    [ -x "$venv/bin/$tool" ] || fail "no $venv/bin/$tool"
    "$venv/bin/$tool" --help > /dev/null || fail "$tool --help"
  done
  for f in "$venv/bin/chorusrun" "$venv/bin/chorus-store" "$site"/chorus/_C*.so; do
    lib="$(ldd "$f" | awk '$1 == "libchorus.so" {print $3}')"
    [ "$(realpath "$lib")" = "$(realpath "$site/chorus/libchorus.so")" ] \
      || fail "$f loads libchorus.so from '${lib}', not $site/chorus"
  done
  echo "test-pip: chorusrun, chorus-store, chorus-trace in $venv/bin run; they and _C load $site/chorus/libchorus.so"

  ddp() {  # launcher-name command...: 2 ranks of ddp_check.py, each must report
    local name="$1"; shift
    local out="$work/ddp-$name.log"
    timeout -k 5 180 "$@" > "$out" 2>&1 || { cat "$out"; fail "DDP under $name"; }
    [ "$(grep -c PIP_DDP_OK "$out")" = 2 ] || { cat "$out"; fail "DDP under $name: not 2 ranks OK"; }
    echo "test-pip: DDP under $name: $(grep -m1 -o 'PIP_DDP_OK rank 0.*' "$out")"
  }
  check="$src/tests/pip/ddp_check.py"
  ddp chorusrun "$venv/bin/chorusrun" --standalone --nproc-per-node 2 "$py" "$check" "$venv"
  ddp "python -m chorus.run" $py -m chorus.run --standalone --nproc-per-node 2 "$check" "$venv"
  port="$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # --redirects/--tee and a log dir: Debian 12's torch 1.13 torchrun misparses its defaults
  # on Python 3.11 (tests/torch/launch.py).
  ddp torchrun $py -m torch.distributed.run --nnodes 1 --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$port" --redirects 1 --tee 1 \
    --log_dir "$work/torchrun-logs" "$check" "$venv"

  t0=$SECONDS
  (cd "$src" && $py -m pip wheel --no-build-isolation --no-index --no-deps -q -w "$work/wheels" \
     --config-settings builddir="$work/build" .) > "$work/pip-wheel.log" 2>&1 \
    || { tail -40 "$work/pip-wheel.log"; fail "pip wheel"; }
  echo "test-pip: pip wheel --no-build-isolation . took $((SECONDS - t0)) s (the install's build dir)"
  wheel="$(ls "$work"/wheels/chorus_collectives-*.whl)"
  $py - "$wheel" <<'EOF' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
data = [n for n in names if ".data/" in n]
want = ["chorus/__init__.py", "chorus/torch.py", "chorus/run.py", "chorus/_version.py",
        "chorus/_C.pyi", "chorus/py.typed", "chorus/libchorus.so"]
missing = [w for w in want if w not in names]
missing += [] if any(n.startswith("chorus/_C.") and n.endswith(".so") for n in names) else ["_C"]
tools = sorted(n.rsplit("/", 1)[1] for n in data if "/scripts/" in n)
extra = [n for n in names if not (n.startswith("chorus/") or ".dist-info/" in n
                                  or "/scripts/" in n)]
assert not missing and tools == ["chorus-store", "chorus-trace", "chorusrun"] and not extra, \
    f"missing {missing}, tools {tools}, unexpected {extra}"
print(f"test-pip: the wheel {sys.argv[1].rsplit('/', 1)[1]} holds {len(names)} files: the "
      f"package, _C, libchorus.so, {', '.join(tools)}; nothing else")
EOF

  $py -m pip uninstall -y -q chorus-collectives > "$work/pip-uninstall.log" 2>&1 || fail "pip uninstall"
  left="$(ls -d "$site"/chorus "$site"/chorus_collectives-*.dist-info "$venv"/bin/chorus* 2>/dev/null || true)"
  [ -z "$left" ] || fail "pip uninstall left: $left"
  echo "test-pip: pip uninstall chorus-collectives removed the package, its record and the tools"
  $py -m pip install --no-index --no-deps -q "$wheel" > "$work/pip-wheel-install.log" 2>&1 \
    || fail "installing the wheel"
  CHORUS_CHORUSRUN="$venv/bin/chorusrun" $py "$src/tests/torch/package_check.py" "$site/chorus" \
    > /dev/null || fail "package_check.py on the installed wheel"
  $py -m pip uninstall -y -q chorus-collectives > /dev/null 2>&1 || fail "pip uninstall (wheel)"
  echo "test-pip: the wheel installs, passes package_check.py, uninstalls"
  exit 0
fi

start=$SECONDS
python="${CHORUS_TEST_PYTHON:-/usr/bin/python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/chorus-pip.XXXXXX")"
trap 'rm -rf "$work"' EXIT
sys_site="$($python -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
sys_torch="$sys_site/torch"

# 1. The venv and its wheel-layout torch.
$python -m venv "$work/venv"
venv="$work/venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')"
mkdir "$site/torch" "$site/torch/include" "$site/torch/lib"
(cd "$sys_torch" && tar cf - --exclude=./include --exclude=./lib .) | (cd "$site/torch" && tar xf -)
for e in "$sys_torch"/include/*; do ln -s "$(realpath "$e")" "$site/torch/include/"; done
for e in "$sys_torch"/lib/*.so; do ln -s "$(realpath "$e")" "$site/torch/lib/$(basename "$e")"; done
cp -a "$sys_site"/torch-*-info "$site/" 2>/dev/null || true  # torch's metadata, for pip
for m in typing_extensions.py mesonpy pyproject_metadata packaging; do
  [ -e "$sys_site/$m" ] || { echo "test-pip: $sys_site/$m missing (python3-mesonpy?)" >&2; exit 1; }
  ln -s "$sys_site/$m" "$site/$m"
done
"$venv/bin/python" -c 'import torch, torch.distributed, mesonpy' \
  || { echo "test-pip: the venv's torch does not import" >&2; exit 1; }
echo "test-pip: venv at $venv (no system site-packages), torch in the wheel layout at $site/torch ($((SECONDS - start)) s)"

# 2-5, with the system's torch hidden where we may.
if [ "$(id -u)" = 0 ] && command -v unshare > /dev/null; then
  unshare --mount --propagation private -- bash -c '
    mount -t tmpfs -o size=1m,mode=0755 tmpfs "$3" && exec "$1" --inside "$2" "$3"' \
    bash "$src/scripts/test_pip.sh" "$work" "$sys_torch"
else
  "$src/scripts/test_pip.sh" --inside "$work" "$sys_torch"
fi
echo "test-pip: done in $((SECONDS - start)) s"
