"""The mountpoint `/dev/fd/N`: a privileged helper (here the test, as root) opens /dev/fuse,
mounts it, and hands the descriptor to a daemon that runs as nobody without any capability,
the way a Kubernetes CSI driver does for a pod without CAP_SYS_ADMIN. Readers see the same view
as through a mount the daemon makes itself; the helper unmounts, and the daemon ends by itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import zarr_view_ref as ref
from zm_harness import BIN

pytestmark = [
    pytest.mark.mount,
    pytest.mark.skipif(os.geteuid() != 0, reason="the test mounts /dev/fuse itself (root)"),
]

NOBODY = 65534
MS_NOSUID, MS_NODEV = 2, 4
LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def kernel_mount(fd: int, mnt: Path) -> None:
    """What the helper does: mount FUSE connection `fd` on `mnt`, for root only (user_id=0,
    no allow_other: the kernel lets no other user in)."""
    data = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    rc = LIBC.mount(b"zarr-mount-handed", str(mnt).encode(), b"fuse.zarr-mount",
                    MS_NOSUID | MS_NODEV, data)
    if rc != 0:
        raise OSError(ctypes.get_errno(), f"mount {mnt}")


def kernel_unmount(mnt: Path, flags: int = 0) -> int:
    return LIBC.umount2(str(mnt).encode(), flags)


def as_nobody(argv: list[str]) -> list[str]:
    # Changing the uid from root drops every capability (no SECBIT_KEEP_CAPS).
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def wait_for_log(log: Path, proc: subprocess.Popen, needle: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} in the daemon's log after {timeout} s:\n{log.read_text()}")


@pytest.fixture
def open_copy(fixtures_dir):
    """The fixture store in a directory nobody may read (pytest's tmp dirs are root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="zm-passed-fd-"))
    d.chmod(0o755)
    shutil.copytree(fixtures_dir, d / "store")
    for p in [d / "store", *(d / "store").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (d / "mnt").mkdir()
    yield d
    kernel_unmount(d / "mnt", 2)  # MNT_DETACH, should the test have failed mounted
    shutil.rmtree(d, ignore_errors=True)


def test_a_daemon_without_privilege_serves_a_connection_handed_to_it(open_copy, fixtures_dir):
    mnt, log = open_copy / "mnt", open_copy / "daemon.log"
    fd = os.open("/dev/fuse", os.O_RDWR)
    proc = None
    try:
        kernel_mount(fd, mnt)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                as_nobody([str(BIN), str(open_copy / "store"), f"/dev/fd/{fd}", "--foreground",
                           "--view", "unsharded", "--read-only", "-v"]),
                pass_fds=[fd], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        # Only the daemon holds the connection now: should it die, readers get ENOTCONN
        # instead of waiting for an answer forever.
        os.close(fd)
        fd = -1
        wait_for_log(log, proc, "mounted")

        status = Path(f"/proc/{proc.pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        cap_eff = next(line for line in status.splitlines() if line.startswith("CapEff:"))
        assert uid_line.split()[1:] == [str(NOBODY)] * 4, uid_line
        assert int(cap_eff.split()[1], 16) == 0, cap_eff

        expected = ref.reference_view(fixtures_dir)
        got = ref.tree_files(mnt)
        assert sorted(got) == sorted(expected)
        problems = [msg for k in sorted(expected)
                    if (msg := ref.check_file(k, expected[k], got[k].read_bytes()))]
        assert not problems, problems

        # The helper unmounts; the daemon sees its connection end and exits cleanly.
        assert kernel_unmount(mnt) == 0, os.strerror(ctypes.get_errno())
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert "unmounted" in log.read_text()
    finally:
        if fd >= 0:
            os.close(fd)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("what", ["not fuse", "closed"])
def test_a_descriptor_that_is_no_fuse_connection_is_one_line_and_exit_2(open_copy, what):
    with open(os.devnull, "rb") as null:
        fd = null.fileno() if what == "not fuse" else 999
        got = subprocess.run([str(BIN), str(open_copy / "store"), f"/dev/fd/{fd}", "--foreground"],
                             pass_fds=[null.fileno()], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and f"/dev/fd/{fd}" in lines[0], got.stderr
    assert ("not an open /dev/fuse" if what == "not fuse" else "not open") in lines[0], got.stderr
