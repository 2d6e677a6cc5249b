"""Local S3-compatible servers for the interop suite, one class per server kind.

Tests take the server kind as a parameter (`S3_SERVERS`), so another server joins every S3
test by adding a class here. Each server listens on 127.0.0.1 only and is stopped by the
fixture that started it, also when the test fails.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from zm_harness import REPO

BUCKET = "bkt"
ACCESS_KEY = "test"
SECRET_KEY = "test-secret"
DAEMON_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_REGION": "us-east-1",
}


def servers_required() -> bool:
    """A test server that cannot be installed fails the test under CI=true (as CI sets it) or
    ZM_REQUIRE_SERVERS=1; elsewhere the test is skipped."""
    return any(os.environ.get(v) in ("1", "true") for v in ("CI", "ZM_REQUIRE_SERVERS"))


def server_unavailable(server: str, why: str) -> None:
    msg = f"{server} {why}"
    if servers_required():
        pytest.fail(f"{msg}, and test servers are required here (CI=true or ZM_REQUIRE_SERVERS=1)")
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """moto's S3 server, through scripts/s3-server.sh (which installs moto[server] if needed)."""

    kind = "moto"
    SCRIPT = REPO / "scripts" / "s3-server.sh"

    def __init__(self, workdir: Path, *, atomic_conditions: bool = False):
        # atomic_conditions: serve one request at a time (MOTO_SERIAL, scripts/s3-server.sh),
        # for tests that race conditional PUTs: threaded moto checks If-None-Match / If-Match
        # and then writes, without a lock, so two racing conditional PUTs can both succeed.
        self.dir = Path(workdir)
        self.port = free_port()
        self.running = False
        self.serial = atomic_conditions

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MotoServer":
        rc = subprocess.run([str(self.SCRIPT), "install"]).returncode
        if rc == 3:
            server_unavailable("moto[server]", "could not be installed (no network?)")
        assert rc == 0, "scripts/s3-server.sh install failed"
        env = dict(os.environ, MOTO_SERIAL="1" if self.serial else "0")
        subprocess.run([str(self.SCRIPT), "start", str(self.dir), str(self.port)], check=True,
                       env=env)
        self.running = True
        self.client().create_bucket(Bucket=BUCKET)
        return self

    def stop(self) -> None:
        if self.running:
            subprocess.run([str(self.SCRIPT), "stop", str(self.dir)], check=False)
            self.running = False

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1")

    def mount_args(self) -> list[str]:
        return ["--endpoint-url", self.endpoint]

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def upload(self, src: Path, prefix: str) -> None:
        """Put every file below `src` as an object under `prefix/` (paths as keys)."""
        c = self.client()
        for f in sorted(src.rglob("*")):
            if f.is_file():
                c.put_object(Bucket=BUCKET, Key=f"{prefix}/{f.relative_to(src)}", Body=f.read_bytes())

    def log_size(self) -> int:
        """Where the request log ends now (pass it to `log_since`)."""
        p = self.dir / "moto.log"
        return len(p.read_text(errors="replace")) if p.exists() else 0

    def log_since(self, start: int) -> str:
        """The request log after `start` (werkzeug lines such as `"GET /bkt/key HTTP/1.1" 206 -`),
        without its colour codes."""
        text = (self.dir / "moto.log").read_text(errors="replace")[start:]
        return re.sub(r"\x1b\[[0-9;]*m", "", text)

    def download(self, prefix: str, dest: Path) -> int:
        """Copy every object below `prefix/` into `dest` (keys as paths); returns how many."""
        c = self.client()
        n = 0
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) + 1:]
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(c.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
                n += 1
        return n


class S3sFsServer(MotoServer):
    """s3s-fs (Rust, crates.io), through scripts/s3-server.sh (which builds it into .tools/
    once). It keeps objects as files under DIR/data/BUCKET, checks request signatures against
    S3S_ACCESS_KEY/S3S_SECRET_KEY, and answers HEAD of a directory-like key with 500. It starts
    in well under a second, so each user gets its own server (no shared state between tests).
    Its conditional PUTs are check-then-write too, in async code: `atomic_conditions` cannot
    be had (it is accepted and ignored; the racing tests skip this server)."""

    kind = "s3s-fs"

    def start(self) -> "S3sFsServer":
        rc = subprocess.run([str(self.SCRIPT), "install", self.kind]).returncode
        if rc == 3:
            server_unavailable("s3s-fs", "could not be installed (no network?)")
        assert rc == 0, "scripts/s3-server.sh install s3s-fs failed"
        env = dict(os.environ, S3S_ACCESS_KEY=ACCESS_KEY, S3S_SECRET_KEY=SECRET_KEY,
                   S3S_LOG=os.environ.get("S3S_LOG", "s3s=info"))
        subprocess.run([str(self.SCRIPT), "start", str(self.dir), str(self.port), self.kind],
                       check=True, env=env)
        self.running = True
        (self.dir / "data" / BUCKET).mkdir(parents=True, exist_ok=True)  # a bucket is a directory
        return self

    def client(self):
        import boto3
        from botocore.config import Config

        # s3s-fs 0.14 predates the CRC checksums newer boto3 sends by default.
        cfg = Config(request_checksum_calculation="when_required",
                     response_checksum_validation="when_required")
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1", config=cfg)


S3_SERVERS = {"moto": MotoServer, "s3s-fs": S3sFsServer}
