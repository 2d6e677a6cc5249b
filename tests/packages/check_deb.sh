#!/usr/bin/env bash
# Check a zarr-mount .deb (scripts/packages.sh runs this):
#   1. dpkg -c lists the binary, the mount(8) helper, the systemd units (the mount's and the
#      server's) with their example env files, the man page and the bash, zsh and fish
#      completions;
#   2. as root, unless ZM_DEB_INSTALL=0: dpkg -i installs it (refused when zarr-mount is
#      already installed as a package: the machine's own install is left alone), `mount -t
#      fuse.zarr-mount` mounts examples/sample.zarr through the installed helper and binary,
#      `man zarr-mount` finds the page, and dpkg -r removes every file it installed.
#
#   tests/packages/check_deb.sh DEB
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
deb="${1:?usage: check_deb.sh DEB}"
say() { printf 'check_deb: %s\n' "$*"; }
fail() { printf 'check_deb: FAILED: %s\n' "$*" >&2; exit 1; }

listing=$(dpkg -c "$deb")
for want in ./usr/bin/zarr-mount ./usr/sbin/mount.fuse.zarr-mount \
    ./lib/systemd/system/zarr-mount@.service ./lib/systemd/system/zarr-mount-serve@.service \
    ./usr/share/doc/zarr-mount/example.env ./usr/share/doc/zarr-mount/serve-example.env \
    ./usr/share/man/man1/zarr-mount.1 \
    ./usr/share/bash-completion/completions/zarr-mount ./usr/share/zsh/vendor-completions/_zarr-mount \
    ./usr/share/fish/vendor_completions.d/zarr-mount.fish ./usr/share/doc/zarr-mount/README.md; do
    # the man page may be gzipped by cargo-deb
    grep -qE " ${want//./\\.}(\.gz)?\$" <<<"$listing" || fail "$deb lacks $want:
$listing"
done
grep -qE '^-rwxr-xr-x .* \./usr/sbin/mount\.fuse\.zarr-mount$' <<<"$listing" || fail "the helper is not executable"
say "contents ok ($(grep -c '^-' <<<"$listing") files)"

if [[ "${ZM_DEB_INSTALL:-1}" == 0 || $(id -u) -ne 0 ]]; then
    say "install and removal not checked (not root, or ZM_DEB_INSTALL=0)"
    exit 0
fi
if dpkg-query -W zarr-mount >/dev/null 2>&1; then
    fail "a zarr-mount package is already installed here; not touching it"
fi
files=$(dpkg -c "$deb" | awk '$1 !~ /^d/ { print substr($6, 2) }')
mnt=$(mktemp -d "${TMPDIR:-/tmp}/zarr-mount-deb.XXXXXX")
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rmdir "$mnt" 2>/dev/null || true
    if dpkg-query -W zarr-mount >/dev/null 2>&1; then dpkg -r zarr-mount >/dev/null || true; fi
}
trap cleanup EXIT
dpkg -i "$deb" >/dev/null
say "installed: $(zarr-mount --version)"
# the installed helper runs the installed binary (no ZARR_MOUNT_BIN, no PATH lookup needed)
env -u ZARR_MOUNT_BIN mount -t fuse.zarr-mount -o ro,view=v2 "$ROOT/examples/sample.zarr" "$mnt"
findmnt -n -t fuse.zarr-mount "$mnt" >/dev/null || fail "findmnt -t fuse.zarr-mount does not list $mnt"
[[ -f "$mnt/zarr.json" || -f "$mnt/.zgroup" ]] || fail "the mount shows no group metadata: $(ls "$mnt")"
MANPATH=/usr/share/man man -w zarr-mount >/dev/null || fail "man zarr-mount finds no page"
# both units run the installed binary
for unit in zarr-mount@.service zarr-mount-serve@.service; do
    grep -q '^ExecStart=/usr/bin/zarr-mount ' "/lib/systemd/system/$unit" ||
        fail "$unit does not run /usr/bin/zarr-mount: $(grep '^ExecStart' "/lib/systemd/system/$unit")"
done
umount "$mnt"
dpkg -r zarr-mount >/dev/null
left=()
for f in $files; do
    [[ -e "$f" || -L "$f" ]] && left+=("$f")
done
((${#left[@]} == 0)) || fail "dpkg -r left: ${left[*]}"
say "installed, mounted with mount -t fuse.zarr-mount, removed cleanly"
