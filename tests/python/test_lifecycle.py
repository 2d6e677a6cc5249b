"""The daemon's life cycle as the CLI contract states it: foreground until SIGTERM/SIGINT or an
external unmount; without --foreground it returns once the mount is live."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from zm_harness import BIN, MOUNT_TIMEOUT, Mount, force_unmount, is_mounted

pytestmark = pytest.mark.mount


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def _pids_with_arg(arg: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if arg.encode() in argv and argv and os.path.basename(argv[0]) == BIN.name.encode():
                pids.append(int(d))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts_and_exits_zero(sig, zarr_mount_bin, fixtures_dir, tmp_path):
    m = Mount(fixtures_dir, tmp_path / "mnt", view="raw", read_only=True)
    m.start()
    try:
        assert (m.path / "zarr.json").read_bytes() == (fixtures_dir / "zarr.json").read_bytes()
        m.proc.send_signal(sig)
        rc = m.proc.wait(timeout=10)
        assert rc == 0, f"exit status {rc}\n{m.log_text()}"
        assert not is_mounted(m.path), "mount left behind"
    finally:
        problems = m.stop()
    assert not problems, problems


def test_external_unmount_ends_foreground_daemon(zarr_mount_bin, fixtures_dir, tmp_path):
    m = Mount(fixtures_dir, tmp_path / "mnt", view="unsharded", read_only=True)
    m.start()
    try:
        os.listdir(m.path)
        subprocess.run(["fusermount3", "-u", str(m.path)], check=True, capture_output=True)
        rc = m.proc.wait(timeout=10)
        assert rc == 0, f"exit status {rc}\n{m.log_text()}"
    finally:
        problems = m.stop()
    assert not problems, problems


def test_daemonizes_without_foreground(zarr_mount_bin, fixtures_dir, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "daemon.log"
    try:
        with open(log, "wb") as out:
            res = subprocess.run([str(BIN), str(fixtures_dir), str(mnt), "--read-only"], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, timeout=MOUNT_TIMEOUT)
        assert res.returncode == 0, log.read_text(errors="replace")
        assert is_mounted(mnt), "the mount must be live when the parent exits"
        assert (mnt / "manifest.json").read_bytes() == (fixtures_dir / "manifest.json").read_bytes()
        pids = _pids_with_arg(str(mnt))
        assert len(pids) == 1, f"expected one daemon process, found {pids}"
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, capture_output=True)
        assert _wait(lambda: not _pids_with_arg(str(mnt)), 10), "daemon still running after unmount"
    finally:
        force_unmount(mnt)
        for pid in _pids_with_arg(str(mnt)):
            os.kill(pid, signal.SIGKILL)


def test_missing_source_fails_cleanly(zarr_mount_bin, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        res = subprocess.run([str(BIN), str(tmp_path / "does-not-exist"), str(mnt), "--foreground"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=MOUNT_TIMEOUT)
        assert res.returncode != 0
        assert res.stderr.strip(), "an error message is expected on stderr"
        assert not is_mounted(mnt)
    finally:
        force_unmount(mnt)
