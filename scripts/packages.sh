#!/usr/bin/env bash
# Build the packages from one release build, and check them (scripts/test.sh's "packages"
# stage):
#
#   scripts/packages.sh            build + check: size, wheel, .deb (contents; install/remove as root)
#   scripts/packages.sh --build    build only: target/release/zarr-mount, target/wheels/*.whl,
#                                  target/debian/*.deb
#
# The release binary must stay below 40 MB. The wheel (maturin, bindings = "bin") is installed
# into a fresh venv by tests/python/test_wheel.py. The .deb (cargo-deb, built once into
# .tools/) has its contents checked with dpkg -c and, as root, is installed with dpkg -i,
# mounted through `mount -t fuse.zarr-mount`, and removed with dpkg -r, leaving nothing behind.
# Environment: CARGO_TARGET_DIR is honoured; ZM_DEB_INSTALL=0 skips the install and removal;
# ZM_TOOLS_DIR (default .tools) is where cargo-deb is built; MATURIN (default .venv/bin/maturin,
# else a venv of its own made once in ZM_TOOLS_DIR, so --build works on a fresh clone).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SCRIPT=packages.sh
TOOLS="${ZM_TOOLS_DIR:-$ROOT/.tools}"
# shellcheck source=lib/cargo-tool.sh
source "$ROOT/scripts/lib/cargo-tool.sh"
CARGO_DEB_VERSION=3.8.0
CARGO_DEB="$TOOLS/cargo-deb-$CARGO_DEB_VERSION/bin/cargo-deb"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/release/zarr-mount"
ASSETS="$TARGET/release/deb-assets"
MAX_BYTES=$((40 * 1000 * 1000))
BUILD_ONLY=0
[[ "${1:-}" == --build ]] && BUILD_ONLY=1

say() { printf 'packages: %s\n' "$*"; }
fail() { printf 'packages: FAILED: %s\n' "$*" >&2; exit 1; }
needs() { printf 'packages: %s\n' "$*" >&2; exit 2; }

# ---- what the steps after the release build need, checked before it
if ((!BUILD_ONLY)) && [[ ! -x .venv/bin/python ]]; then
    needs "the checks install the wheel with .venv/bin/python: run scripts/setup.sh first (or use --build)"
fi
if [[ -z "${MATURIN:-}" ]]; then
    MATURIN="$ROOT/.venv/bin/maturin"
    if [[ ! -x "$MATURIN" ]]; then
        MATURIN="$TOOLS/maturin/bin/maturin"
        # the version pyproject.toml builds with
        spec=$(sed -n 's/^requires = \["\(maturin[^"]*\)"\]/\1/p' pyproject.toml)
        if [[ ! -x "$MATURIN" ]]; then
            say "making $TOOLS/maturin: a venv with $spec"
            rm -rf "$TOOLS/maturin"
            python3 -m venv "$TOOLS/maturin" >/dev/null 2>&1 &&
                "$TOOLS/maturin/bin/python" -m pip install -q --disable-pip-version-check "$spec" ||
                needs "cannot make a venv with $spec in $TOOLS/maturin: run scripts/setup.sh first, or set MATURIN"
        fi
    fi
fi
[[ -x "$MATURIN" ]] || needs "MATURIN=$MATURIN is not an executable"

# ---- the release binary (shared by the wheel and the .deb)
say "cargo build --release"
cargo build --release
size=$(stat -c %s "$BIN")
say "release binary: $((size / 1000000)) MB ($size bytes); $("$BIN" --version)"
((size < MAX_BYTES)) || fail "the release binary is $size bytes, above $MAX_BYTES"

# ---- the wheel, from the same build (maturin reuses target/release)
say "maturin build --release"
rm -f "$TARGET"/wheels/zarr_mount-*.whl
"$MATURIN" build --release --quiet
wheel=$(ls "$TARGET"/wheels/zarr_mount-*.whl)
say "wheel: $wheel"

# ---- the .deb: generated man page and completions, the helper and unit pointing at /usr/bin
# (--no-strip: the release profile already strips debug info and symbols, and cargo-deb would try to strip
# the helper script too, since it sits under target/release)
rm -rf "$ASSETS"
"$BIN" --generate-docs "$ASSETS" >/dev/null
sed 's#^DEFAULT_BIN=.*#DEFAULT_BIN=/usr/bin/zarr-mount#' scripts/mount.zarr-mount >"$ASSETS/mount.fuse.zarr-mount"
for unit in zarr-mount@.service zarr-mount-serve@.service; do
    sed 's#/usr/local/bin/zarr-mount#/usr/bin/zarr-mount#g; s#/usr/local/share/doc/zarr-mount#/usr/share/doc/zarr-mount#g' \
        "systemd/$unit" >"$ASSETS/$unit"
done
cargo_install cargo-deb "$CARGO_DEB_VERSION" "$CARGO_DEB" 3
say "cargo deb --no-build"
deb=$("$CARGO_DEB" deb --no-build --no-strip --quiet | tail -n1)
[[ -f "$deb" ]] || fail "cargo deb did not say where the .deb is ($deb)"
say "deb: $deb"
((BUILD_ONLY)) && exit 0

# ---- the wheel: installed into a fresh venv, mounts the sample store
say "pytest tests/python/test_wheel.py"
ZM_WHEEL="$wheel" .venv/bin/python -m pytest tests/python/test_wheel.py -q -p no:cacheprovider

# ---- the .deb: contents, then install, mount, remove
tests/packages/check_deb.sh "$deb"
say "ok"
