#!/usr/bin/env bash
# Undo scripts/install.sh (use the same --prefix).
#
#   scripts/uninstall.sh [--prefix DIR] [--purge] [--dry-run]
#
#   --purge     also delete /etc/zarr-mount (env files with credentials); kept by default
#   --dry-run   print what would be done, change nothing
#   DESTDIR=DIR (environment) act below DIR, as install.sh does
#
# Running zarr-mount@*.service instances are stopped and disabled first (SIGTERM: pending
# writes are flushed and the mounts unmounted). Mounts made by fstab are left alone: remove
# their fstab lines and unmount them yourself.
set -euo pipefail

PREFIX=/usr/local
PREFIX_GIVEN=0
PURGE=0
DRY=0
DESTDIR="${DESTDIR:-}"

while (($#)); do
    case "$1" in
        --prefix) PREFIX="${2:?--prefix needs a directory}"; PREFIX_GIVEN=1; shift 2 ;;
        --prefix=*) PREFIX="${1#*=}"; PREFIX_GIVEN=1; shift ;;
        --purge) PURGE=1; shift ;;
        --dry-run | -n) DRY=1; shift ;;
        -h | --help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "uninstall.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ "$PREFIX" == /* ]] || { echo "uninstall.sh: --prefix must be an absolute path" >&2; exit 2; }
PREFIX="${PREFIX%/}"

if ((PREFIX_GIVEN)); then
    UNITDIR="$PREFIX/lib/systemd/system"
    HELPER="$PREFIX/sbin/mount.fuse.zarr-mount"
    HELPER_LINK="/sbin/mount.fuse.zarr-mount"
else
    UNITDIR="/etc/systemd/system"
    HELPER="/sbin/mount.fuse.zarr-mount"
    HELPER_LINK=""
fi

run() {
    if ((DRY)); then
        printf '+'; printf ' %q' "$@"; printf '\n'
    else
        "$@"
    fi
}
say() { printf 'uninstall: %s\n' "$*"; }

if [[ -z "$DESTDIR" ]] && [[ -d /run/systemd/system ]]; then
    mapfile -t units < <(systemctl list-units --all --plain --no-legend 'zarr-mount@*.service' | awk '{print $1}')
    for u in "${units[@]}"; do
        say "stopping and disabling $u"
        run systemctl disable --now "$u" || true
    done
fi

for f in "$PREFIX/bin/zarr-mount" "$HELPER" "$UNITDIR/zarr-mount@.service" \
    "$PREFIX/share/doc/zarr-mount/example.env" "$PREFIX/share/doc/zarr-mount/README.md"; do
    if [[ -e "$DESTDIR$f" || -L "$DESTDIR$f" ]]; then
        say "removing $DESTDIR$f"
        run rm -f "$DESTDIR$f"
    fi
done
# The /sbin link only if it is ours.
if [[ -n "$HELPER_LINK" && -L "$DESTDIR$HELPER_LINK" && "$(readlink "$DESTDIR$HELPER_LINK")" == "$HELPER" ]]; then
    say "removing $DESTDIR$HELPER_LINK"
    run rm -f "$DESTDIR$HELPER_LINK"
fi
if [[ -d "$DESTDIR$PREFIX/share/doc/zarr-mount" ]]; then
    run rmdir --ignore-fail-on-non-empty "$DESTDIR$PREFIX/share/doc/zarr-mount"
fi

if [[ -d "$DESTDIR/etc/zarr-mount" ]]; then
    if ((PURGE)); then
        say "purging $DESTDIR/etc/zarr-mount"
        run rm -rf "$DESTDIR/etc/zarr-mount"
    else
        say "keeping $DESTDIR/etc/zarr-mount (env files); --purge deletes it"
    fi
fi
if [[ -z "$DESTDIR" ]] && [[ -d /run/systemd/system ]]; then
    run systemctl daemon-reload
fi
say "done"
