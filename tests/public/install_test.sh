#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The installed package: `meson install` of this build into a temporary root, then a C program
# (shared library) and a C++ program (static library) built with nothing but
# `pkg-config --cflags --libs chorus`, each run on 2 ranks with torchrun-style variables.
set -eu
# As in a user's shell: meson test points LD_LIBRARY_PATH at the build tree, which would win
# over the installed library.
unset LD_LIBRARY_PATH
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/chorus_install.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== meson install --destdir $tmp/root"
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "meson install"; }
pc=$(find "$tmp/root" -name chorus.pc | head -n 1)
[ -n "$pc" ] || fail "no chorus.pc installed"
libdir=$(dirname "$(dirname "$pc")")
incdir=$(find "$tmp/root" -type d -path '*/include/chorus' | head -n 1)
for f in "$libdir/libchorus.so" "$libdir/libchorus.a" "$incdir/chorus.h" "$incdir/chorus.hpp" \
         "$incdir/version.h" "$incdir/ddp.hpp" "$incdir/dlpack.hpp"; do
  [ -e "$f" ] || fail "missing from the install: $f"
done
echo "installed: $(cd "$tmp/root" && find . -name 'libchorus*' -o -name chorus.pc | sort | tr '\n' ' ')"

# Relocate the staged package: the .pc must name every path through ${prefix}, so setting
# prefix= to where the files now lie gives exactly what `meson setup --prefix=<there>` installs.
grep -q '^prefix=' "$pc" || fail "chorus.pc has no prefix= line"
prefix=$(sed -n 's/^prefix=//p' "$pc")
if grep -qE -- "-[IL]$prefix/(include|lib)" "$pc"; then fail "chorus.pc hard-codes the prefix: $(cat "$pc")"; fi
# Installed tools carry a RUNPATH to the installed libdir: they run in any prefix without
# LD_LIBRARY_PATH.
runtime_libdir=$(sed -n 's/^libdir=//p' "$pc" | sed "s|\${prefix}|$prefix|")
for tool in chorusrun chorus-store; do
  runpath=$(readelf -d "$tmp/root$prefix/bin/$tool" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  case ":$runpath:" in
    *":$runtime_libdir:"*) ;;
    *) fail "installed $tool has RUNPATH '$runpath', which does not contain $runtime_libdir" ;;
  esac
done
sed -i "s|^prefix=.*|prefix=$tmp/root$prefix|" "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
cflags=$(pkg-config --cflags chorus)
libs=$(pkg-config --libs chorus)
static_libs=$(pkg-config --libs --static chorus)
echo "pkg-config --cflags --libs chorus: $cflags $libs"
echo "pkg-config --libs --static chorus: $static_libs"
case "$libs" in *"$libdir"*) ;; *) fail "pkg-config --libs does not point into the install ($libs)";; esac

CC=${CC:-cc}
CXX=${CXX:-c++}
echo "== C program, shared library"
# shellcheck disable=SC2086
$CC -std=c99 -o "$tmp/allreduce_c" "$src/examples/allreduce_c.c" $cflags $libs -Wl,-rpath,"$libdir" ||
  fail "building a C program against the installed chorus"
ldd "$tmp/allreduce_c" | grep -q "$libdir/libchorus.so" || { ldd "$tmp/allreduce_c"; fail "not linked to the installed libchorus.so"; }
echo "== C++17 program, static library"
# The static archive plus what the .pc lists for static linking (-lchorus itself replaced).
# shellcheck disable=SC2086
$CXX -std=c++17 -o "$tmp/installed_cxx" "$src/tests/public/installed_cxx.cpp" $cflags \
  "$libdir/libchorus.a" $(echo "$static_libs" | sed -e 's/ -lchorus / /' -e 's/^-lchorus //' -e 's/ -lchorus$//') ||
  fail "building a C++ program against the installed static chorus"
if ldd "$tmp/installed_cxx" | grep -q libchorus; then fail "the static build still needs libchorus.so"; fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

# Runs $1 on 2 ranks as torchrun would start them; checks each rank's answer.
run2() {
  local exe=$1 port
  port=$(free_port)
  pids=()
  for r in 0 1; do
    env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE -u SLURM_PROCID -u SLURM_NTASKS \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
      CHORUS_TIMEOUT=30s CHORUS_SOCKET_IFNAME=127.0.0.1 \
      timeout 60 "$exe" >"$tmp/out.$r" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  pids=()
  cat "$tmp/out.0" "$tmp/out.1"
  [ "$status" = 0 ] || fail "$(basename "$exe") failed on 2 ranks"
  for r in 0 1; do
    grep -q "^rank $r/2: 3 (expected 3)" "$tmp/out.$r" || fail "rank $r of $(basename "$exe") printed the wrong sum"
  done
}
echo "== 2 ranks: allreduce_c"
run2 "$tmp/allreduce_c"
echo "== 2 ranks: installed_cxx"
run2 "$tmp/installed_cxx"
grep -q "token 77" "$tmp/out.1" || fail "broadcast did not reach rank 1"
echo "installed package OK"
