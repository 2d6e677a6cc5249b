"""`zarr-mount serve` for the interop suite: start a server on 127.0.0.1 (port chosen by the
system), wait for its ready line (bounded), stop it at teardown."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

from zm_harness import BIN

READY_TIMEOUT = float(os.environ.get("ZM_MOUNT_TIMEOUT", "20"))
READY = re.compile(r"zarr-mount: serving .* at (https?://[^ ]+/) ")


class ServeError(Exception):
    pass


class Server:
    """One `zarr-mount serve` process; `url` is its base URL once started."""

    def __init__(self, source, log_path: Path, *, args: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.source = str(source)
        self.args = list(args or [])
        self.env = dict(env or {})
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.url = ""

    @property
    def argv(self) -> list[str]:
        return [str(BIN), "serve", self.source, "--listen", "127.0.0.1:0", *self.args]

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return "(no log)"

    def start(self) -> "Server":
        env = dict(os.environ, RUST_BACKTRACE="1", **self.env)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=log, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        seen = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise ServeError(f"no ready line after {READY_TIMEOUT} s\n{self.log_text()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                rc = self.proc.wait()
                raise ServeError(f"zarr-mount serve exited with {rc} before it was ready\n"
                                 f"argv: {' '.join(self.argv)}\n{self.log_text()}")
            seen += chunk
            m = READY.search(seen.decode(errors="replace"))
            if m:
                self.url = m.group(1)
                return self

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        if p.stdout:
            p.stdout.close()
        return p.returncode

    # ---- requests -----------------------------------------------------------------------

    def connection(self) -> http.client.HTTPConnection:
        host, port = self.url.split("//")[1].rstrip("/").split(":")
        return http.client.HTTPConnection(host, int(port), timeout=30)


def url_path(*names: str) -> str:
    return "/" + "/".join(quote(n, safe="") for n in names)


def get(conn: http.client.HTTPConnection, path: str, headers: dict | None = None,
        method: str = "GET") -> tuple[int, dict, bytes]:
    """One request on a kept-alive connection: (status, headers lower-cased, body)."""
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def listing(conn, path: str) -> list[dict]:
    status, _, body = get(conn, path, {"Accept": "application/json"})
    assert status == 200, (path, status, body[:200])
    return json.loads(body)["entries"]
