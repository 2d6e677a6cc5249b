#!/usr/bin/env bash
# The main job, end to end: build zarr-mount, mount the bundled sample store
# (examples/sample.zarr, a group with a sharded array) in the default unsharded view,
# show what a tool that knows nothing about sharding sees, and unmount.
#
#   scripts/demo.sh                 mount, show, unmount
#   scripts/demo.sh SOURCE          the same for another store
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SOURCE="${1:-examples/sample.zarr}"

step() { printf '\n== demo: %s\n' "$*"; }

step "setting up: apt packages and the Python venv with zarr-python (scripts/setup.sh; minutes the first time)"
ZM_SETUP_READERS=0 scripts/setup.sh  # the demo needs the suite venv only
step "building the release binary (cargo build --release; several minutes the first time)"
cargo build --release
BIN="$ROOT/target/release/zarr-mount"

MNT="$(mktemp -d "${TMPDIR:-/tmp}/zarr-mount-demo.XXXXXX")"
cleanup() {
    if grep -qsF " $MNT " /proc/self/mounts; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT

step "mounting: zarr-mount $SOURCE $MNT (returns once the mount is live)"
"$BIN" "$SOURCE" "$MNT"
echo
echo "== the store as stored (shards):"
(cd "$SOURCE" && find . -type f | sort)
echo
echo "== the mount (inner chunks as files, shards hidden):"
(cd "$MNT" && find . -type f -printf '%10s  %p\n' | sort -k2)
if [[ -f "$MNT/images/temperature/zarr.json" ]]; then
    echo
    echo "== rewritten metadata of images/temperature (chunk_grid and codecs):"
    .venv/bin/python - "$MNT/images/temperature/zarr.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"chunk_grid": m["chunk_grid"], "codecs": m["codecs"]}, indent=1))
PY
fi
echo
echo "== zarr-python reading through the mount vs. the store itself:"
.venv/bin/python - "$MNT" "$SOURCE" <<'PY' 2>/dev/null
import sys, numpy as np, zarr
mnt, src = sys.argv[1], sys.argv[2]
g_m, g_s = zarr.open_group(mnt, mode="r"), zarr.open_group(src, mode="r")
for name, arr in sorted(g_s.arrays(), key=lambda t: t[0]) + sorted(
        ((f"{gn}/{an}", a) for gn, g in g_s.groups() for an, a in g.arrays()), key=lambda t: t[0]):
    via_mount = zarr.open_array(f"{mnt}/{name}", mode="r")
    same = np.array_equal(via_mount[:], arr[:])
    print(f"{name:22s} shape={arr.shape} chunks in mount={via_mount.chunks} "
          f"shards in store={arr.shards} identical={same}")
PY
echo
echo "== unmounting"
fusermount3 -u "$MNT"
