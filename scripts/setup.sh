#!/usr/bin/env bash
# Install what the zarr-mount build and test suite need on a fresh Debian 12 machine.
# Idempotent: every step checks first and is skipped when already done.
#
#   scripts/setup.sh            system packages + .venv (zarr 3, tensorstore, pytest)
#                               + .venv-zarr2 (zarr-python 2, for the v2-view tests)
#   ZM_SETUP_ZARR2=0 scripts/setup.sh     skip .venv-zarr2 (--all / --zarr2: build it, the default)
#
# Environment: PYTHON (interpreter for the venvs, default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WANT_ZARR2="${ZM_SETUP_ZARR2:-1}"

for arg in "$@"; do
    case "$arg" in
        --all | --zarr2) WANT_ZARR2=1 ;;
        -h | --help)
            sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "setup.sh: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

step() { printf 'setup: %-28s %s\n' "$1" "$2"; }

# ---------------------------------------------------------------- system packages
# g++: libfuzzer-sys compiles libFuzzer (scripts/fuzz.sh).
# prometheus: its promtool checks the /metrics scrape (tests/it/metrics.rs).
APT_PACKAGES=(fuse3 libblosc-dev pkg-config systemd g++ prometheus)
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    APT_PACKAGES+=(python3-venv)
fi
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]} == 0)); then
    step "apt packages" "ok (${APT_PACKAGES[*]})"
else
    if [[ $(id -u) -ne 0 ]]; then
        SUDO=(sudo)
    else
        SUDO=()
    fi
    step "apt packages" "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq >/dev/null
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    step "apt packages" "installed ${missing[*]}"
fi

if [[ -e /dev/fuse ]]; then
    step "/dev/fuse" "ok"
else
    step "/dev/fuse" "MISSING (mount tests will fail)"
fi

# ---------------------------------------------------------------- venvs
# make_venv DIR REQUIREMENTS_FILE
# The marker file inside the venv holds a hash of the requirements file and the interpreter
# version; when it matches, nothing is done.
make_venv() {
    local dir="$1" req="$2" name
    name="$(basename "$dir")"
    local key
    key="$( { cat "$req"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
    local marker="$dir/.zm-setup-ok"
    if [[ -x "$dir/bin/python" && -f "$marker" && "$(cat "$marker")" == "$key" ]]; then
        step "$name" "ok ($("$dir/bin/python" -c 'import zarr; print("zarr", zarr.__version__)'))"
        return
    fi
    local want_ver have_ver
    want_ver="$("$PYTHON" -c 'import sys; print(sys.version)')"
    have_ver="$("$dir/bin/python" -c 'import sys; print(sys.version)' 2>/dev/null || true)"
    if [[ "$have_ver" != "$want_ver" ]]; then
        step "$name" "creating venv with $("$PYTHON" --version 2>&1)"
        rm -rf "$dir"
        "$PYTHON" -m venv "$dir"
    fi
    step "$name" "installing $(basename "$req")"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$key" >"$marker"
    step "$name" "ready ($("$dir/bin/python" -c 'import zarr; print("zarr", zarr.__version__)'))"
}

make_venv "$ROOT/.venv" "$ROOT/tests/python/requirements.txt"

if [[ "$WANT_ZARR2" == 1 ]]; then
    make_venv "$ROOT/.venv-zarr2" "$ROOT/tests/python/requirements-zarr2.txt"
    # zarr-python 2 with its default dependencies only (issue 18): drop crc32c left by older setups.
    if "$ROOT/.venv-zarr2/bin/python" -c 'import crc32c' 2>/dev/null; then
        "$ROOT/.venv-zarr2/bin/python" -m pip uninstall -y -q crc32c
    fi
else
    step ".venv-zarr2" "skipped (ZM_SETUP_ZARR2=0; the zarr-2 tests will fail)"
fi
