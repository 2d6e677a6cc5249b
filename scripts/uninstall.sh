#!/usr/bin/env bash
# Undo scripts/install.sh (use the same --prefix).
#
#   scripts/uninstall.sh [--prefix DIR] [--purge] [--dry-run]
#
#   --purge     also delete /etc/zarr-mount (env files with credentials); kept by default
#   --dry-run   print what would be done, change nothing
#   DESTDIR=DIR (environment) act below DIR, as install.sh does
#
# Running zarr-mount@*.service and zarr-mount-serve@*.service instances are stopped and disabled
# first (SIGTERM: pending writes are flushed and the mounts unmounted; servers finish the
# responses in flight). Mounts made by fstab are left alone: remove
# their fstab lines and unmount them yourself.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRIPT=uninstall.sh
# shellcheck source=lib/install-common.sh
source "$ROOT/scripts/lib/install-common.sh"
PREFIX=/usr/local
PREFIX_GIVEN=0
PURGE=0
DRY=0
DESTDIR="${DESTDIR:-}"

while (($#)); do
    parse_common_arg "$@"
    if ((CONSUMED)); then shift "$CONSUMED"; continue; fi
    case "$1" in
        --purge) PURGE=1; shift ;;
        -h | --help) usage_from_header; exit 0 ;;
        *) echo "uninstall.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
set_install_paths

say() { printf 'uninstall: %s\n' "$*"; }

if [[ -z "$DESTDIR" ]] && [[ -d /run/systemd/system ]]; then
    mapfile -t units < <(systemctl list-units --all --plain --no-legend 'zarr-mount@*.service' \
        'zarr-mount-serve@*.service' | awk '{print $1}')
    for u in "${units[@]}"; do
        say "stopping and disabling $u"
        run systemctl disable --now "$u" || true
    done
fi

for f in "$BINDIR/zarr-mount" "$HELPER" "${UNITS[@]/#/$UNITDIR/}" \
    "${ENV_EXAMPLES[@]/#/$DOCDIR/}" "$DOCDIR/README.md" "${GENERATED[@]#*=}"; do
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
for doc in "$ROOT"/docs/*.md; do
    f="$DOCDIR/docs/$(basename "$doc")"
    if [[ -e "$DESTDIR$f" ]]; then
        say "removing $DESTDIR$f"
        run rm -f "$DESTDIR$f"
    fi
done
for d in "$DOCDIR/docs" "$DOCDIR"; do
    if [[ -d "$DESTDIR$d" ]]; then
        run rmdir --ignore-fail-on-non-empty "$DESTDIR$d"
    fi
done

if [[ -d "$DESTDIR$CONFDIR" ]]; then
    if ((PURGE)); then
        say "purging $DESTDIR$CONFDIR"
        run rm -rf "$DESTDIR$CONFDIR"
    else
        say "keeping $DESTDIR$CONFDIR (env files); --purge deletes it"
    fi
fi
if [[ -z "$DESTDIR" ]] && [[ -d /run/systemd/system ]]; then
    run systemctl daemon-reload
fi
say "done"
