#!/bin/sh
# `mount -a` from a test fstab, run twice, inside a private mount namespace (unshare -m) whose
# /usr/sbin is a directory holding only the helper under test: mount(8) looks for
# mount.fuse.zarr-mount in /sbin only, and the machine's own /sbin stays untouched.
#
#   unshare --mount --propagation private fstab_mount_all.sh HELPER FSTAB SCRATCH MNT...
#
# Prints `first=RC`, `second=RC`, then `findmnt -t fuse.zarr-mount` (columns SOURCE TARGET
# FSTYPE), then `ls` of each MNT; unmounts every MNT on the way out, whatever happened.
set -u
helper=$1 fstab=$2 scratch=$3
shift 3
unmount_all() {
    for m in "$@"; do umount "$m" 2>/dev/null; done
}
trap 'unmount_all "$@"' EXIT
mkdir -p "$scratch/sbin"
cp "$helper" "$scratch/sbin/mount.fuse.zarr-mount"
mount --bind "$scratch/sbin" /usr/sbin
mount -a -T "$fstab"
echo "first=$?"
mount -a -T "$fstab"
echo "second=$?"
findmnt -n -r -t fuse.zarr-mount -o SOURCE,TARGET,FSTYPE
for m in "$@"; do
    echo "ls $m: $(ls "$m" | tr '\n' ' ')"
done
