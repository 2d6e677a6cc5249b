"""Mount harness for the zarr-mount interop suite (used by conftest.py and the tests).

See conftest.py for the binary contract and the environment knobs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BIN = Path(os.environ.get("ZARR_MOUNT_BIN") or REPO / "target" / "debug" / "zarr-mount")
REQUIRE_BINARY = os.environ.get("ZM_REQUIRE_BINARY") == "1"
# In CI scripts/setup.sh installs every tool and venv a test needs, so one that is missing
# there is a failure; elsewhere the test is skipped.
REQUIRE_TOOLS = REQUIRE_BINARY or os.environ.get("CI") == "true"
DAEMON_ARGS = os.environ.get("ZM_DAEMON_ARGS", "-v").split()
MOUNT_TIMEOUT = float(os.environ.get("ZM_MOUNT_TIMEOUT", "20"))
STOP_TIMEOUT = 10.0

def missing(what: str) -> None:
    """`what` (a tool, a venv) is not on this machine: fail in CI, skip elsewhere."""
    if REQUIRE_TOOLS:
        pytest.fail(what)
    pytest.skip(what)


def require_tool(*names: str) -> str:
    """The path of the first of `names` on PATH (one program, under its other names too)."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    missing(f"{names[0]} is not installed (scripts/setup.sh installs it)")


# Mounts currently up, so that a failing test's report carries their daemon logs.
ACTIVE_MOUNTS: list["Mount"] = []


# --------------------------------------------------------------------------- mount helpers


def _unescape_mount_field(s: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        octal = s[i + 1: i + 4]
        if s[i] == "\\" and len(octal) == 3 and octal.isdigit():
            out.append(chr(int(octal, 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mount_entries() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) of every mount in this mount namespace."""
    entries = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                entries.append((_unescape_mount_field(parts[0]), _unescape_mount_field(parts[1]), parts[2]))
    return entries


def is_mounted(path: Path | str) -> bool:
    p = os.path.realpath(path)
    return any(mp == p for _, mp, _ in mount_entries())


def force_unmount(path: Path | str) -> None:
    """Lazy-unmount `path` if it is still mounted (ignores errors)."""
    for cmd in (["fusermount3", "-u", "-z", str(path)], ["umount", "-l", str(path)]):
        if not is_mounted(path):
            return
        if shutil.which(cmd[0]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


class MountError(Exception):
    pass


class Mount:
    """One zarr-mount daemon in --foreground mode, with its log file."""

    def __init__(self, source: Path, mountpoint: Path, *, view: str | None = "unsharded",
                 read_only: bool = False, extra_args: list[str] | None = None, log_path: Path | None = None,
                 env: dict[str, str] | None = None):
        # `source` may also be a URL (s3://bucket/prefix); `env` adds to the daemon's environment.
        self.source = source if isinstance(source, str) and "://" in source else Path(source)
        self.env = dict(env or {})
        self.path = Path(mountpoint)
        self.view = view
        self.read_only = read_only
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path or self.path.parent / f"{self.path.name}.zarr-mount.log")
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._stopped = False

    @property
    def argv(self) -> list[str]:
        argv = [str(BIN), str(self.source), str(self.path), "--foreground"]
        if self.view is not None:
            argv += ["--view", self.view]
        if self.read_only:
            argv.append("--read-only")
        return argv + DAEMON_ARGS + self.extra_args

    def log_text(self, tail: int | None = 200) -> str:
        """The daemon's log: its last `tail` lines (for failure messages), or all of it with
        `tail=None` (for assertions that a line was logged: at -v the daemon logs every ENOENT
        answer at DEBUG, which pushes older lines out of any tail)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        if tail is not None and len(lines) > tail:
            lines = [f"... ({len(lines) - tail} earlier lines in {self.log_path})"] + lines[-tail:]
        return "\n".join(lines)

    def start(self) -> "Mount":
        self.path.mkdir(parents=True, exist_ok=True)
        if is_mounted(self.path):
            raise MountError(f"{self.path} is already a mount point")
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.update(self.env)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        ACTIVE_MOUNTS.append(self)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while True:
            if is_mounted(self.path):
                return self
            rc = self.proc.poll()
            if rc is not None:
                self.stop()
                raise MountError(f"zarr-mount exited with {rc} before {self.path} was mounted\n"
                                 f"argv: {' '.join(self.argv)}\n--- log ---\n{self.log_text()}")
            if time.monotonic() > deadline:
                self.stop()
                raise MountError(f"{self.path} not mounted after {MOUNT_TIMEOUT} s\n"
                                 f"argv: {' '.join(self.argv)}\n--- log ---\n{self.log_text()}")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and is_mounted(self.path)

    def check_alive(self) -> None:
        if not self.alive():
            rc = None if self.proc is None else self.proc.poll()
            raise MountError(f"zarr-mount at {self.path} is gone (exit status {rc}, "
                             f"mounted={is_mounted(self.path)})\n--- log ---\n{self.log_text()}")

    def stop(self) -> list[str]:
        """SIGTERM, wait, unmount if needed, SIGKILL if needed. Returns problems found."""
        problems: list[str] = []
        if self._stopped:
            return problems
        self._stopped = True
        if self in ACTIVE_MOUNTS:
            ACTIVE_MOUNTS.remove(self)
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                problems.append(f"did not exit within {STOP_TIMEOUT} s of SIGTERM")
            except ProcessLookupError:
                pass
        elif proc is not None and proc.returncode not in (0, None):
            problems.append(f"had already exited with status {proc.returncode}")
        if is_mounted(self.path):
            if proc is not None and proc.poll() is not None:
                problems.append("left its mount behind after exiting")
            force_unmount(self.path)
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                problems.append("survived SIGKILL for 5 s")
        elif proc is not None and proc.returncode not in (0, None) and not problems:
            problems.append(f"exited with status {proc.returncode} after SIGTERM")
        if self._log is not None:
            self._log.close()
            self._log = None
        return problems

    def stop_checked(self) -> None:
        problems = self.stop()
        if problems:
            raise MountError(f"zarr-mount at {self.path}: {'; '.join(problems)}\n--- log ---\n{self.log_text()}")



@functools.lru_cache(maxsize=None)
def fixture_array_paths() -> tuple[str, ...]:
    """Array paths gen_fixtures.py writes, known at collection time (for parametrize)."""
    spec = importlib.util.spec_from_file_location("gen_fixtures", REPO / "scripts" / "gen_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tuple(path for path, *_ in mod.SPECS)


def run_generator(script: str, out: Path, timeout: float | None = None) -> Path:
    """Run scripts/<script> OUT with the suite's interpreter; the test fails with its output
    if it does."""
    res = subprocess.run([sys.executable, str(REPO / "scripts" / script), str(out)],
                         capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        pytest.fail(f"{script} failed ({res.returncode}):\n{res.stdout}\n{res.stderr[-5000:]}")
    return out
