#!/usr/bin/env bash
# Install zarr-mount as a service: binary, mount(8) helper, systemd template unit.
#
#   scripts/install.sh [--prefix DIR] [--binary PATH] [--no-deps] [--dry-run]
#
#   --prefix DIR    default /usr/local. The binary goes to DIR/bin. With the default prefix the
#                   unit goes to /etc/systemd/system and the helper to /sbin; with an explicit
#                   prefix they go to DIR/lib/systemd/system and DIR/sbin, plus a symlink
#                   /sbin/mount.fuse.zarr-mount (where mount(8) looks) to DIR/sbin.
#   --binary PATH   install this binary instead of building one (cargo build --release)
#   --no-deps       do not apt-get install fuse3 when it is missing
#   --dry-run       print what would be done, change nothing
#   DESTDIR=DIR     (environment) stage everything below DIR, for packaging; implies no apt,
#                   no systemctl; the /sbin symlink is made inside DESTDIR too
#
# Also creates /etc/zarr-mount (mode 700) and installs the example env file, README and docs/ to
# PREFIX/share/doc/zarr-mount. Undo with scripts/uninstall.sh (same --prefix).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRIPT=install.sh
# shellcheck source=lib/install-common.sh
source "$ROOT/scripts/lib/install-common.sh"
PREFIX=/usr/local
PREFIX_GIVEN=0
BINARY=""
DEPS=1
DRY=0
DESTDIR="${DESTDIR:-}"

while (($#)); do
    parse_common_arg "$@"
    if ((CONSUMED)); then shift "$CONSUMED"; continue; fi
    case "$1" in
        --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
        --binary=*) BINARY="${1#*=}"; shift ;;
        --no-deps) DEPS=0; shift ;;
        -h | --help) usage_from_header; exit 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
set_install_paths

say() { printf 'install: %s\n' "$*"; }
# install_edited SRC DEST MODE SED_EXPR: install a copy of SRC edited by SED_EXPR.
install_edited() {
    if ((DRY)); then
        printf '+ sed %q %q > %q && chmod %s %q\n' "$4" "$1" "$2" "$3" "$2"
    else
        sed "$4" "$1" >"$2"
        chmod "$3" "$2"
    fi
}

# ---- runtime dependency: fusermount3 (package fuse3)
if [[ -z "$DESTDIR" ]] && ! command -v fusermount3 >/dev/null 2>&1; then
    if ((DEPS)) && command -v apt-get >/dev/null 2>&1; then
        say "fuse3 is missing: installing it"
        run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fuse3
    else
        say "WARNING: fusermount3 not found; install the fuse3 package"
    fi
fi

# ---- the binary
if [[ -z "$BINARY" ]]; then
    say "building the release binary"
    run cargo build --release --manifest-path "$ROOT/Cargo.toml"
    BINARY="$ROOT/target/release/zarr-mount"
elif [[ ! -x "$BINARY" ]] && ((!DRY)); then
    echo "install.sh: --binary $BINARY is not an executable file" >&2
    exit 2
fi

say "binary      -> $DESTDIR$BINDIR/zarr-mount"
run install -D -m 0755 "$BINARY" "$DESTDIR$BINDIR/zarr-mount"

# ---- mount(8) helper, with the default binary path pointing at this install
say "fstab helper -> $DESTDIR$HELPER"
run install -d -m 0755 "$DESTDIR$(dirname "$HELPER")"
install_edited "$ROOT/scripts/mount.zarr-mount" "$DESTDIR$HELPER" 0755 "s#^DEFAULT_BIN=.*#DEFAULT_BIN=$BINDIR/zarr-mount#"
if [[ -n "$HELPER_LINK" && "$HELPER_LINK" != "$HELPER" ]]; then
    say "fstab helper link $DESTDIR$HELPER_LINK -> $HELPER"
    run install -d -m 0755 "$DESTDIR$(dirname "$HELPER_LINK")"
    run ln -sfn "$HELPER" "$DESTDIR$HELPER_LINK"
fi

# ---- systemd template unit, ExecStart pointing at this install
say "systemd unit -> $DESTDIR$UNITDIR/zarr-mount@.service"
run install -d -m 0755 "$DESTDIR$UNITDIR"
install_edited "$ROOT/systemd/zarr-mount@.service" "$DESTDIR$UNITDIR/zarr-mount@.service" 0644 \
    "s#/usr/local/bin/zarr-mount#$BINDIR/zarr-mount#g"

# ---- configuration directory and documentation
say "config dir  -> $DESTDIR$CONFDIR (env files: NAME.env for zarr-mount@NAME)"
run install -d -m 0700 "$DESTDIR$CONFDIR"
say "docs        -> $DESTDIR$DOCDIR"
run install -D -m 0644 "$ROOT/systemd/example.env" "$DESTDIR$DOCDIR/example.env"
run install -D -m 0644 "$ROOT/README.md" "$DESTDIR$DOCDIR/README.md"
# README's links point into docs/: keep the same layout.
for doc in "$ROOT"/docs/*.md; do
    run install -D -m 0644 "$doc" "$DESTDIR$DOCDIR/docs/$(basename "$doc")"
done

if [[ -z "$DESTDIR" ]] && [[ -d /run/systemd/system ]]; then
    run systemctl daemon-reload
fi
if ((PREFIX_GIVEN)) && [[ "$UNITDIR" != /usr/lib/systemd/system && "$UNITDIR" != /lib/systemd/system ]]; then
    say "note: systemd does not read $UNITDIR; use: systemctl link $UNITDIR/zarr-mount@.service"
fi
say "done. Next: cp $DOCDIR/example.env $CONFDIR/NAME.env; edit it; systemctl enable --now zarr-mount@NAME"
