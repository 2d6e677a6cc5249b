"""The trust boundary of reference sets (issue 51, docs/SECURITY.md): a reference file is data.
Mounted by root with --allow-other, one whose targets name the host's own files (`/etc/shadow`,
`file:///etc/passwd`, `../../etc/hostname`) shows nothing of them to another user (nobody,
through setpriv): those chunk files are EIO, with a log line naming --authorize-virtual. One
whose HTTP target redirects to an internal host (the instance metadata service in the wild) is
EIO too, and that host receives no request. What stays allowed: targets next to a local
reference file, a directory authorized with --authorize-virtual file:///DIR/, targets in the
reference file's own bucket, and a redirect within the reference file's own origin."""

from __future__ import annotations

import contextlib
import errno
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from zm_harness import Mount
from zm_s3 import BUCKET, DAEMON_ENV, MotoServer

pytestmark = [
    pytest.mark.mount,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts as root and reads as nobody (setpriv)"),
]

NOBODY = 65534
SECRETS = {"shadow": "/etc/shadow", "passwd": "/etc/passwd", "hostname": "/etc/hostname"}
DATA = bytes(range(256)) * 4


@pytest.fixture
def open_dir(zarr_mount_bin):
    """A directory nobody can traverse (pytest's own tmp dirs are root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="zm-trust-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def mounted(source, mnt: Path, args: list[str], env: dict | None = None):
    m = Mount(source, mnt, view="raw", extra_args=["--allow-other", *args], env=env)
    m.start()
    try:
        yield m
    finally:
        problems = m.stop()
        assert not problems, f"{problems}\n{m.log_text()}"


def read_as_nobody(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                           "cat", str(path)], capture_output=True, timeout=60)


def assert_nothing_read(m: Mount, name: str) -> None:
    got = read_as_nobody(m.path / name)
    assert got.returncode != 0 and got.stdout == b"", (name, got.stdout[:40])
    assert b"Input/output error" in got.stderr, (name, got.stderr)


def zarr_refs(refs: dict) -> dict:
    return {"version": 1, "refs": {".zgroup": '{"zarr_format":2}', **refs}}


def host_file_refs(climb: str) -> dict:
    return {
        "shadow": ["file:///etc/shadow", 0, 64],
        "shadow_whole": ["/etc/shadow"],
        "passwd": ["/etc/passwd", 0, 64],
        "hostname": [climb + "etc/hostname", 0, 4],
    }


def test_a_local_reference_file_reads_no_host_file_outside_its_directory(open_dir):
    refs_dir = open_dir / "refs"
    refs_dir.mkdir()
    (refs_dir / "data.bin").write_bytes(DATA)
    climb = "../" * (len(refs_dir.parts) + 2)
    (refs_dir / "escape").symlink_to("/etc/passwd")
    refs = {**host_file_refs(climb), "next_to_it": ["data.bin", 100, 50],
            "symlink_out": ["escape", 0, 16]}
    (refs_dir / "refs.json").write_text(json.dumps(zarr_refs(refs)))
    with mounted(refs_dir / "refs.json", open_dir / "mnt", []) as m:
        # The read as nobody works: the allowed file next to the reference file.
        got = read_as_nobody(m.path / "next_to_it")
        assert got.returncode == 0 and got.stdout == DATA[100:150], got.stderr
        for name in ("shadow", "shadow_whole", "passwd", "hostname", "symlink_out"):
            assert_nothing_read(m, name)
        with pytest.raises(OSError) as e:
            (m.path / "shadow").read_bytes()  # nor as root
        assert e.value.errno == errno.EIO
        m.check_alive()
        log = m.log_text(tail=None)
        assert "--authorize-virtual file:///etc/" in log, log


def test_an_authorized_directory_is_read(open_dir):
    data = open_dir / "data"  # plays /data: outside the reference file's directory
    data.mkdir()
    (data / "f.bin").write_bytes(DATA)
    refs_dir = open_dir / "refs"
    refs_dir.mkdir()
    refs = {"a": [f"file://{data}/f.bin", 10, 20], "b": [str(data / "f.bin"), 300, 8],
            "shadow": ["/etc/shadow", 0, 64]}
    (refs_dir / "refs.json").write_text(json.dumps(zarr_refs(refs)))
    with mounted(refs_dir / "refs.json", open_dir / "mnt0", []) as m:
        assert_nothing_read(m, "a")
    with mounted(refs_dir / "refs.json", open_dir / "mnt1",
                 ["--authorize-virtual", f"file://{data}/"]) as m:
        assert read_as_nobody(m.path / "a").stdout == DATA[10:30]
        assert read_as_nobody(m.path / "b").stdout == DATA[300:308]
        assert_nothing_read(m, "shadow")


def test_a_reference_file_in_a_bucket_reads_no_local_file(open_dir):
    moto = MotoServer(open_dir / "moto").start()
    try:
        c = moto.client()
        c.put_object(Bucket=BUCKET, Key="refs/data.bin", Body=DATA)
        refs = {**host_file_refs("../../"), "in_bucket": ["data.bin", 5, 10]}
        c.put_object(Bucket=BUCKET, Key="refs/refs.json", Body=json.dumps(zarr_refs(refs)).encode())
        with mounted(f"s3://{BUCKET}/refs/refs.json", open_dir / "mnt", moto.mount_args(),
                     env=DAEMON_ENV) as m:
            assert read_as_nobody(m.path / "in_bucket").stdout == DATA[5:15]
            for name in ("shadow", "shadow_whole", "passwd"):
                assert_nothing_read(m, name)
            # A relative path that climbs out of the bucket is refused as before.
            assert_nothing_read(m, "hostname")
            assert "--authorize-virtual file:///etc/" in m.log_text(tail=None)
    finally:
        moto.stop()


class _Server:
    """A static HTTP server on 127.0.0.1 with Range support; `redirects` maps a path to the URL
    it answers 302 with; `requests` counts what it was asked."""

    def __init__(self, files: dict[str, bytes], redirects: dict[str, str] | None = None):
        self.files, self.redirects, self.requests = files, dict(redirects or {}), []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def answer(self, body: bool):
                outer.requests.append(f"{self.command} {self.path}")
                if self.path in outer.redirects:
                    self.send_response(302)
                    self.send_header("Location", outer.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start, end, status = 0, len(data), 200
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    start, end = (int(a), min(int(b) + 1, len(data)) if b else len(data)) if a \
                        else (len(data) - int(b), len(data))
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                if body:
                    self.wfile.write(data[start:end])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_redirect_to_an_internal_host_is_not_followed(open_dir):
    b = _Server({"/latest/meta-data/creds": b"SECRET-CREDENTIALS"})
    a = _Server({"/data.bin": DATA})
    try:
        refs = {"leak": [f"{a.origin}/moved", 0, 18], "inside": [f"{a.origin}/here", 40, 16]}
        a.files["/refs.json"] = json.dumps(zarr_refs(refs)).encode()
        a.redirects["/moved"] = f"{b.origin}/latest/meta-data/creds"
        a.redirects["/here"] = f"{a.origin}/data.bin"
        with mounted(f"{a.origin}/refs.json", open_dir / "mnt", []) as m:
            # A redirect within the reference file's own origin is followed.
            assert read_as_nobody(m.path / "inside").stdout == DATA[40:56]
            assert_nothing_read(m, "leak")
            with pytest.raises(OSError) as e:
                (m.path / "leak").read_bytes()
            assert e.value.errno == errno.EIO
            assert b.requests == [], b.requests
            assert f"--authorize-virtual {b.origin}/" in m.log_text(tail=None)
        # Authorized, the same redirect is followed: B's answer is the chunk.
        with mounted(f"{a.origin}/refs.json", open_dir / "mnt2",
                     ["--authorize-virtual", f"{b.origin}/latest/"]) as m:
            assert (m.path / "leak").read_bytes() == b"SECRET-CREDENTIALS"
    finally:
        a.close()
        b.close()


ICECHUNK_WRITER = r"""
import sys, icechunk as ic, zarr
repo_dir, origin = sys.argv[1], sys.argv[2]
config = ic.RepositoryConfig.default()
config.set_virtual_chunk_container(ic.VirtualChunkContainer(origin + "/", ic.http_store()))
repo = ic.Repository.create(ic.local_filesystem_storage(repo_dir), config)
s = repo.writable_session("main")
a = zarr.create_array(s.store, name="a", shape=(36,), chunks=(18,), dtype="uint8", fill_value=0,
                      compressors=None, filters=None)
s.store.set_virtual_ref("a/c/0", origin + "/here", offset=0, length=18)
s.store.set_virtual_ref("a/c/1", origin + "/moved", offset=0, length=18)
s.commit("virtual chunks over HTTP")
"""


def test_an_icechunk_http_container_follows_no_redirect_to_an_internal_host(open_dir):
    """An Icechunk repository whose HTTP virtual chunk container (authorized: it is on
    127.0.0.1) answers one chunk with a redirect to another internal host: that chunk file is
    EIO, the other host receives no request, and a redirect within the container's own origin
    is followed."""
    pytest.importorskip("icechunk")
    b = _Server({"/latest/meta-data/creds": b"SECRET-CREDENTIALS"})
    a = _Server({"/data.bin": b"chunk-of-container"})
    try:
        a.redirects["/moved"] = f"{b.origin}/latest/meta-data/creds"
        a.redirects["/here"] = f"{a.origin}/data.bin"
        repo = open_dir / "repo"
        subprocess.run([sys.executable, "-c", ICECHUNK_WRITER, str(repo), a.origin], check=True)
        with mounted(repo, open_dir / "mnt", ["--authorize-virtual", f"{a.origin}/"]) as m:
            assert (m.path / "a/c/0").read_bytes() == b"chunk-of-container"
            with pytest.raises(OSError) as e:
                (m.path / "a/c/1").read_bytes()
            assert e.value.errno == errno.EIO
            assert b.requests == [], b.requests
            assert "redirect not followed" in m.log_text(tail=None)
    finally:
        a.close()
        b.close()
