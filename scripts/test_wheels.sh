#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The wheels of `make wheels` as a user meets them (`make test-wheels`):
#   scripts/test_wheels.sh VERSION...
# For each torch release: a fresh virtual environment, then `pip install chorus-collectives`
# from dist/ with torch and its dependencies from the cached downloads (scripts/torch_venv.sh's
# wheels/, offline): the pinned requirement alone brings the torch the wheel was built for.
# No compiler is reachable (CC and CXX name false, and pip must build nothing); then 2 ranks
# of DDP under the environment's chorusrun (tests/pip/ddp_check.py). Last, the wheel's
# pins at work: the wheel for another minor refuses this torch (pip, offline), and its chorus
# forced in beside it (--no-deps) fails at import naming the build to get.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
[ $# -gt 0 ] || { echo "usage: scripts/test_wheels.sh TORCH_VERSION..." >&2; exit 2; }
root="${CHORUS_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/chorus}"
work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-test-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "test-wheels: FAILED: $*" >&2; exit 1; }

minor_of() {  # 2.15 -> 2.15, 2.15.0 -> 2.15
  echo "$1" | cut -d. -f1,2
}
wheel_for() {  # minor -> its wheel in dist/
  local found
  found=$(ls dist/chorus_collectives-*+torch"$1"-*manylinux*.whl 2> /dev/null | tail -1)
  [ -n "$found" ] || fail "no wheel for torch $1 in dist/ (make wheels WHEEL_TORCH=$1)"
  echo "$found"
}

versions=("$@")
for version in "${versions[@]}"; do
  minor=$(minor_of "$version")
  wheel=$(wheel_for "$minor")
  venv="$work/venv-$minor"
  t0=$SECONDS
  /usr/bin/python3 -m venv "$venv"
  py="$venv/bin/python"
  CC=false CXX=false "$py" -m pip install --disable-pip-version-check --no-index \
      --find-links "$root/wheels" "$wheel" > "$work/install-$minor.log" 2>&1 ||
    { tail -30 "$work/install-$minor.log"; fail "pip install $wheel"; }
  if grep -qiE "building wheel|running setup.py|meson" "$work/install-$minor.log"; then
    cat "$work/install-$minor.log"; fail "installing $wheel built something"
  fi
  got=$("$py" -c 'import torch; print(torch.__version__)')
  [ "$(minor_of "$got")" = "$minor" ] || fail "the wheel for $minor brought torch $got"
  echo "test-wheels: $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) and torch $got into a fresh venv: $((SECONDS - t0)) s, nothing built"

  out="$work/ddp-$minor.log"
  (cd "$work" && CC=false CXX=false timeout -k 5 180 "$venv/bin/chorusrun" --standalone \
      --nproc-per-node 2 "$py" "$src/tests/pip/ddp_check.py" "$venv") > "$out" 2>&1 ||
    { cat "$out"; fail "DDP on torch $got"; }
  [ "$(grep -c PIP_DDP_OK "$out")" = 2 ] || { cat "$out"; fail "DDP on torch $got: not 2 ranks OK"; }
  echo "test-wheels: DDP on torch $got: $(grep -m1 -o 'PIP_DDP_OK rank 0.*' "$out")"
done

# A wheel meets a torch of another minor (needs two versions).
if [ ${#versions[@]} -ge 2 ]; then
  a=$(minor_of "${versions[0]}") b=$(minor_of "${versions[1]}")
  venv="$work/venv-$a" other=$(wheel_for "$b")
  if "$venv/bin/python" -m pip install --disable-pip-version-check --no-index "$other" \
      > "$work/refuse.log" 2>&1; then
    fail "pip installed the wheel for torch $b beside torch $a"
  fi
  grep -q "torch==$b" "$work/refuse.log" || { cat "$work/refuse.log"; fail "pip's refusal does not name torch==$b"; }
  echo "test-wheels: pip refuses the wheel for torch $b beside torch $a: $(grep -m1 -o "[^:]*torch==$b[^ ]*" "$work/refuse.log")"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
      --force-reinstall "$other" > /dev/null 2>&1 || fail "pip install --no-deps $other"
  if "$venv/bin/python" -c 'import chorus.torch' > "$work/import.log" 2>&1; then
    fail "chorus built for torch $b imported under torch $a"
  fi
  grep -q "ImportError: chorus .* was built for torch $b .* Install the build for torch $a" "$work/import.log" ||
    { cat "$work/import.log"; fail "the import error does not name the build to get"; }
  echo "test-wheels: chorus for torch $b under torch $a: $(grep -o 'ImportError: .*' "$work/import.log" | cut -c1-160)..."
fi
echo "test-wheels: ok"
