# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the scripts that fill a virtual environment from the package index
# (torch_venv.sh, build_wheels.sh): every download is kept in one wheel folder, so a package is
# fetched once per machine and every later install works offline.
#   cached_pip_install PYTHON WHEEL_DIR REQUIREMENT...
# Installs from WHEEL_DIR alone; when it lacks something, downloads the requirements there
# first (binary wheels only), then installs from it.
cached_pip_install() {
  local py=$1 wheels=$2
  shift 2
  local pip=("$py" -m pip --disable-pip-version-check)
  mkdir -p "$wheels"
  if ! "${pip[@]}" install --quiet --no-index --find-links "$wheels" "$@" 2> /dev/null; then
    "${pip[@]}" download --progress-bar off --only-binary=:all: -d "$wheels" "$@" >&2
    "${pip[@]}" install --quiet --no-index --find-links "$wheels" "$@" >&2
  fi
}
