"""Mount a Zarr store from Python with the zarr-mount daemon that this package installs.

    import zarr, zarr_mount
    with zarr_mount.mount("s3://bucket/data.zarr", view="v2", read_only=True,
                          endpoint_url="http://127.0.0.1:9000") as path:
        group = zarr.open_group(path, mode="r")

Without FUSE (a laptop, a container, a browser's data), `serve()` runs `zarr-mount serve`
and yields the base URL of every view over HTTP:

    with zarr_mount.serve("s3://bucket/data.zarr", view="v2") as url:
        group = zarr.open_group(url + "v2/", mode="r")

The daemon runs in the foreground as a child process: `mount()` returns once it reports the
mount live (systemd's readiness protocol on a private socket), raises `MountError` with the
daemon's one-line reason when it cannot mount, and stops it (SIGTERM: pending writes are
written back, then it unmounts) when the block ends, also through an exception, and at
interpreter exit for mounts still open then.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Union

__all__ = ["MountError", "binary", "mount", "serve"]

#: Values of the keyword options: a flag's value, True for a bare flag, a list to repeat it.
OptionValue = Union[str, int, float, bool, None, list[str]]

#: Seconds `mount()` waits for the daemon to report the mount live.
DEFAULT_TIMEOUT = 60.0

# Daemons still running, stopped at interpreter exit.
_live: set[subprocess.Popen[bytes]] = set()


class MountError(RuntimeError):
    """The daemon could not mount. `str()` is its one-line reason; `returncode` is 2 for a bad
    argument or source (wrong flag value, endpoint, credentials, bucket), 1 otherwise."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


def binary() -> str:
    """The zarr-mount executable: `$ZARR_MOUNT_BIN`, else the one installed beside this module's
    interpreter (the wheel's), else the first on PATH."""
    if env := os.environ.get("ZARR_MOUNT_BIN"):
        return env
    beside = Path(sysconfig.get_path("scripts")) / "zarr-mount"
    if beside.is_file():
        return str(beside)
    if found := shutil.which("zarr-mount"):
        return found
    raise MountError("zarr-mount executable not found (set ZARR_MOUNT_BIN)", None)


def _flags(options: dict[str, OptionValue]) -> list[str]:
    """`cache_size="512M"` -> `--cache-size 512M`, `allow_other=True` -> `--allow-other`,
    `option=["k=v", ...]` -> `--option k=v ...`; False and None are left out."""
    args: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v is True:
                args.append(flag)
            elif v is not False and v is not None:
                args += [flag, str(v)]
    return args


# Words that make an object-store option's value a secret (as the daemon's own list).
_SECRET_WORDS = ("secret", "token", "password", "access_key", "account_key", "sas",
                 "service_account_key", "client_secret")
# The environment prefix object_store reads each cloud's options from.
_ENV_PREFIXES = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_", "gcs": "GOOGLE_", "az": "AZURE_",
                 "azure": "AZURE_", "abfs": "AZURE_", "abfss": "AZURE_", "adl": "AZURE_"}


def _secrets_to_env(
    options: dict[str, OptionValue], source: str
) -> tuple[dict[str, OptionValue], dict[str, str]]:
    """Move `option=["aws_secret_access_key=..."]` and other secret-valued object-store options
    out of the daemon's command line (which every user sees in `ps`) into its environment,
    under the name object_store reads them from (`AWS_SECRET_ACCESS_KEY`). Options whose key
    has no cloud prefix take the prefix of the source's scheme."""
    raw = options.get("option")
    if raw is None or raw is False:
        return options, {}
    values = raw if isinstance(raw, list) else [raw]
    scheme = source.split("://", 1)[0].split("+")[-1].lower() if "://" in source else ""
    prefix = _ENV_PREFIXES.get(scheme)
    kept: list[str] = []
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = str(item).partition("=")
        lowered = key.lower()
        if sep and any(w in lowered for w in _SECRET_WORDS):
            if any(lowered.startswith(p.lower()) for p in set(_ENV_PREFIXES.values())):
                env[key.upper()] = value
                continue
            if prefix:
                env[(prefix + key).upper()] = value
                continue
        kept.append(str(item))
    rest = {k: v for k, v in options.items() if k != "option"}
    if kept:
        rest["option"] = kept
    return rest, env


def _reason(log: str, returncode: int | None) -> str:
    """The daemon's one-line error: its last `zarr-mount: ...` line."""
    for line in reversed(log.splitlines()):
        if line.startswith("zarr-mount: "):
            return line[len("zarr-mount: ") :]
    return f"zarr-mount exited with status {returncode} before mounting"


def _wait_ready(
    proc: subprocess.Popen[bytes], sock: socket.socket, timeout: float
) -> bool:
    """True once the daemon sent READY=1; False if it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.1)[0]:
            if b"READY=1" in sock.recv(4096).split(b"\n"):
                return True
        elif proc.poll() is not None:
            return False
    raise MountError(f"the mount was not live after {timeout:g} s", None)


def _wait_status(
    proc: subprocess.Popen[bytes], sock: socket.socket, timeout: float
) -> str | None:
    """The STATUS= of the daemon's READY=1 notification; None if it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.1)[0]:
            lines = sock.recv(4096).decode(errors="replace").split("\n")
            if "READY=1" in lines:
                return next((ln[len("STATUS=") :] for ln in lines if ln.startswith("STATUS=")), "")
        elif proc.poll() is not None:
            return None
    raise MountError(f"the server was not ready after {timeout:g} s", None)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM and wait: the daemon writes back pending data, then unmounts."""
    _live.discard(proc)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait()


@atexit.register
def _stop_all() -> None:
    for proc in list(_live):
        _stop(proc)


@contextlib.contextmanager
def mount(
    source: str | os.PathLike[str],
    mountpoint: str | os.PathLike[str] | None = None,
    *,
    view: str = "unsharded",
    read_only: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    **options: OptionValue,
) -> Iterator[Path]:
    """Mount `source` (a directory, s3://, gs://, az://, http(s)://, a zip, references, an
    Icechunk repository) on `mountpoint` (a fresh temporary directory if None) and yield the
    mounted path. `view` is one of raw, unsharded, decoded, v2, v2-decoded; any other
    zarr-mount flag is a keyword (`cache_dir="/var/cache/zm"`, `option=["k=v"]`)."""
    made_dir = mountpoint is None
    target = Path(tempfile.mkdtemp(prefix="zarr-mount-") if made_dir else mountpoint)  # type: ignore[arg-type]
    work = tempfile.TemporaryDirectory(prefix="zarr-mount-notify-")
    proc: subprocess.Popen[bytes] | None = None
    try:
        head = ["--foreground", "--view", view] + (["--read-only"] if read_only else [])
        proc, _ = _start(work.name, head, options, [os.fspath(source), str(target)],
                         lambda p, sock: "" if _wait_ready(p, sock, timeout) else None)
        yield target
    finally:
        if proc is not None:
            _stop(proc)
        work.cleanup()
        if made_dir:
            with contextlib.suppress(OSError):
                target.rmdir()


def _start(
    workdir: str,
    head: list[str],
    options: dict[str, OptionValue],
    positional: list[str],
    ready: Callable[[subprocess.Popen[bytes], socket.socket], str | None],
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the daemon (`head` flags, then `options` as flags, then `positional`) with a
    systemd notify socket in `workdir`, secret options in its environment rather than on its
    command line, and wait until `ready` says it is (its status line; None: it failed, and the
    reason in its log is raised as a MountError)."""
    sock_path = os.path.join(workdir, "notify")
    log_path = os.path.join(workdir, "log")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, open(log_path, "wb") as log:
        sock.bind(sock_path)
        options, secret_env = _secrets_to_env(options, positional[0])
        args = [binary(), *head] + _flags(options) + ["--", *positional]
        env = dict(os.environ, NOTIFY_SOCKET=sock_path, **secret_env)
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            # a Ctrl-C reaches Python, whose exit stops the daemon in order
            start_new_session=True,
        )
        _live.add(proc)
        status = ready(proc, sock)
        if status is None:
            _live.discard(proc)
            text = Path(log_path).read_text(errors="replace")
            raise MountError(_reason(text, proc.returncode), proc.returncode)
    return proc, status


@contextlib.contextmanager
def serve(
    source: str | os.PathLike[str],
    *,
    view: str | list[str] | None = None,
    listen: str = "127.0.0.1:0",
    timeout: float = DEFAULT_TIMEOUT,
    **options: OptionValue,
) -> Iterator[str]:
    """Serve `source` over HTTP (`zarr-mount serve`, read-only) and yield the base URL, such as
    `http://127.0.0.1:41234/`; each view is under the URL plus its name (`url + "v2/"`).
    `view`: one view name or a list (default: every view). `listen` defaults to a free port on
    the loopback interface; any other flag is a keyword (`token_file=...`,
    `cors_origin=["*"]`, `cache_dir=...`). Stops the server when the block ends."""
    views = [view] if isinstance(view, str) else list(view or [])
    work = tempfile.TemporaryDirectory(prefix="zarr-mount-serve-")
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc, status = _start(work.name, ["serve", "--listen", listen], {"view": views, **options},
                              [os.fspath(source)], lambda p, sock: _wait_status(p, sock, timeout))
        url = next((w for w in status.split() if w.startswith(("http://", "https://"))), None)
        if url is None:
            raise MountError(f"no URL in the server's status: {status!r}", None)
        yield url
    finally:
        if proc is not None:
            _stop(proc)
        work.cleanup()
