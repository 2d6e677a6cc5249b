#!/usr/bin/env bash
# Chaos soak (not part of the default test run; scripts/test.sh runs a 1-minute one as its
# "soak" stage): two daemons on one S3 bucket, moto then s3s-fs, under writers, readers,
# server restarts, latency spikes, cut connections and disk-cache eviction. scripts/soak.py
# says what is checked.
#
#   scripts/soak.sh [--minutes N] [--servers moto,s3s-fs] [--workdir DIR] [--rss-limit-mb MB]
#                   [--cut-connections auto|always|never] [--contention [--readers-at-writer N]]
#
# Needs root (FUSE mounts) and the suite venv (scripts/setup.sh). Environment: ZARR_MOUNT_BIN
# (default: the debug binary, built when missing), CARGO_TARGET_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
    -h | --help)
        sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || { echo "soak.sh: no suite venv at .venv: run scripts/setup.sh" >&2; exit 1; }
export ZARR_MOUNT_BIN="${ZARR_MOUNT_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/zarr-mount}"
if [[ ! -x "$ZARR_MOUNT_BIN" ]]; then
    echo "soak.sh: building zarr-mount"
    cargo build --quiet
fi
exec "$PY" "$ROOT/scripts/soak.py" "$@"
