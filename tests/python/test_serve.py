"""`zarr-mount serve`: every view over HTTP equals the same view through a FUSE mount, read by
real clients (zarr-python 3 through fsspec's HTTP store); HTTP semantics the readers rely on;
bad input and faults (a 5xx, never a 404, when the store fails)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from zm_harness import BIN, fixture_array_paths
from zm_readers import assert_same_array, zp_read
from zm_serve import Server, get, listing, url_path

VIEWS = ["raw", "unsharded", "decoded", "v2", "v2-decoded", "flat"]


@pytest.fixture
def serve_factory(tmp_path, zarr_mount_bin):
    servers: list[Server] = []

    def start(source, args=None, env=None) -> Server:
        s = Server(source, tmp_path / f"serve-{len(servers)}.log", args=args, env=env)
        servers.append(s)
        return s.start()

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def _fixture_server(tmp_path_factory, fixtures_dir):
    s = Server(fixtures_dir, tmp_path_factory.mktemp("serve") / "serve.log")
    s.start()
    yield s
    s.stop()


@pytest.fixture
def fixture_server(_fixture_server):
    assert _fixture_server.proc.poll() is None, _fixture_server.log_text()
    return _fixture_server


def compare_tree(server: Server, view: str, root: Path) -> int:
    """Every directory listing, file size and file's bytes of `root` (a mount of `view`)
    equal over HTTP; returns how many files were compared."""
    conn = server.connection()
    files = 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        entries = listing(conn, url_path(view, *rel) + "/")
        by_name = {e["name"]: e for e in entries}
        assert sorted(by_name) == sorted(dirnames + filenames), (view, rel)
        for d in dirnames:
            assert by_name[d]["type"] == "directory", (view, rel, d)
        for f in filenames:
            want = (Path(dirpath) / f).read_bytes()
            status, headers, body = get(conn, url_path(view, *rel, f))
            assert status == 200, (view, rel, f, status, body[:200])
            assert int(headers["content-length"]) == len(want), (view, rel, f)
            assert body == want, (view, rel, f)
            assert by_name[f]["type"] == "file"
            if "size" in by_name[f]:
                assert by_name[f]["size"] == len(want), (view, rel, f)
            files += 1
    conn.close()
    return files


@pytest.mark.parametrize("view", VIEWS)
def test_every_file_of_every_view_equals_the_mount(fixture_server, mount_factory, fixtures_dir, view):
    mount = mount_factory(fixtures_dir, view=view, read_only=True)
    assert compare_tree(fixture_server, view, mount.path) > 3


def test_zip_views_equal_the_mount(serve_factory, mount_factory, tmp_path, fixtures_dir):
    import zipfile

    archive = tmp_path / "store.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(fixtures_dir.rglob("*")):
            if f.is_file() and "manifest" not in f.name:
                z.write(f, f.relative_to(fixtures_dir).as_posix())
    server = serve_factory(archive, ["--view", "raw", "--view", "v2"])
    for view in ["raw", "v2"]:
        mount = mount_factory(archive, view=view, read_only=True)
        assert compare_tree(server, view, mount.path) > 3


def test_s3_views_equal_the_mount(serve_factory, mount_factory, moto, fixtures_dir):
    moto.upload(fixtures_dir, "fx")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    server = serve_factory(moto.url("fx"), moto.mount_args() + ["--view", "unsharded", "--view", "flat"], env=env)
    for view in ["unsharded", "flat"]:
        mount = mount_factory(moto.url("fx"), view=view, read_only=True,
                              extra_args=moto.mount_args(), env=env)
        assert compare_tree(server, view, mount.path) > 3


@pytest.mark.parametrize("view", ["unsharded", "raw"])
@pytest.mark.parametrize("path", fixture_array_paths())
def test_zarr_python_3_reads_every_array_over_http(fixture_server, fixtures_dir, view, path):
    import zarr

    got = zarr.open_array(f"{fixture_server.url}{view}/{path}", mode="r")[...]
    assert_same_array(got, zp_read(fixtures_dir, path), f"{view}/{path}")


def test_ranges_and_conditional_requests(fixture_server, fixtures_dir):
    conn = fixture_server.connection()
    want = (fixtures_dir / "zarr.json").read_bytes()
    status, h, body = get(conn, "/raw/zarr.json")
    assert (status, body) == (200, want)
    assert h["content-type"] == "application/json" and h["accept-ranges"] == "bytes"
    etag, date = h["etag"], h["last-modified"]
    n = len(want)
    for spec, part in [("bytes=1-4", want[1:5]), ("bytes=5-", want[5:]), ("bytes=-3", want[-3:])]:
        status, h, body = get(conn, "/raw/zarr.json", {"Range": spec})
        assert status == 206 and body == part, spec
        assert h["content-range"].endswith(f"/{n}") and int(h["content-length"]) == len(part)
    status, h, _ = get(conn, "/raw/zarr.json", {"Range": f"bytes={n}-"})
    assert status == 416 and h["content-range"] == f"bytes */{n}"
    assert get(conn, "/raw/zarr.json", {"If-None-Match": etag})[0] == 304
    assert get(conn, "/raw/zarr.json", {"If-Modified-Since": date})[0] == 304
    assert get(conn, "/raw/zarr.json", {"Range": "bytes=0-0", "If-Range": etag})[0] == 206
    status, _, body = get(conn, "/raw/zarr.json", {"Range": "bytes=0-0", "If-Range": '"other"'})
    assert (status, body) == (200, want)
    status, h, body = get(conn, "/raw/zarr.json", method="HEAD")
    assert status == 200 and body == b"" and int(h["content-length"]) == n
    for method in ["PUT", "DELETE", "POST", "PATCH"]:
        status, h, _ = get(conn, "/raw/zarr.json", method=method)
        assert status == 405 and "GET" in h["allow"], method
    status, h, _ = get(conn, "/raw")
    assert status == 301 and h["location"] == "/raw/"


def test_paths_never_leave_the_store(fixture_server, tmp_path):
    secret = b"outside the store"
    (tmp_path / "secret.txt").write_bytes(secret)
    conn = fixture_server.connection()
    for path in ["/raw/../secret.txt", "/raw/%2e%2e/%2e%2e/etc/passwd", "/raw/..%2f..%2fetc/passwd",
                 "/raw/a%2fb", "/../../etc/passwd", "/raw/%00", "/raw//..//..//etc/passwd",
                 "/nope/zarr.json"]:
        status, _, body = get(conn, path)
        assert status in (400, 404), (path, status)
        assert secret not in body and b"root:" not in body, path


def test_missing_keys_are_404(fixture_server, manifest):
    conn = fixture_server.connection()
    assert get(conn, "/raw/no-such-array/zarr.json")[0] == 404
    assert get(conn, "/v2/no-such-array/.zarray")[0] == 404
    assert get(conn, "/raw/zarr.json/inside")[0] == 404


def test_a_non_loopback_listen_needs_a_token(zarr_mount_bin, fixtures_dir):
    r = subprocess.run([str(BIN), "serve", str(fixtures_dir), "--listen", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token-file" in lines[0], r.stderr


@pytest.mark.parametrize("threads", ["0", "5000", "two"])
def test_a_bad_http_threads_is_one_line_and_exit_2(zarr_mount_bin, fixtures_dir, threads):
    r = subprocess.run([str(BIN), "serve", str(fixtures_dir), "--http-threads", threads],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--http-threads" in lines[0], r.stderr


ACCESS_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z  INFO zarr_mount::serve::access: "
    r"client=127\.0\.0\.1:\d+ method=(\w+) path=(\S+) status=(\d+) bytes=(\d+) "
    r"ms=\d+\.\d{3} complete=(true|false)$")


def access_lines(text: str) -> list[tuple[str, str, int, int, str]]:
    out = []
    for line in text.splitlines():
        if "serve::access" in line:
            m = ACCESS_LINE.match(line)
            assert m, line
            out.append((m[1], m[2], int(m[3]), int(m[4]), m[5]))
    return out


def test_the_access_log_has_a_line_a_request_and_a_filter_turns_it_off(serve_factory,
                                                                       fixtures_dir):
    # More threads than this machine's cores: requests on several connections land on
    # different threads, and each line is written once, whole.
    server = serve_factory(fixtures_dir, ["--view", "raw", "--http-threads", "3"])
    conns = [server.connection() for _ in range(6)]
    sent = []
    for i, conn in enumerate(conns):
        status, _, body = get(conn, "/raw/zarr.json")
        assert status == 200
        sent.append(("GET", "/raw/zarr.json", 200, len(body), "true"))
        status, _, body = get(conn, f"/raw/no-such-{i}")
        assert status == 404
        sent.append(("GET", f"/raw/no-such-{i}", 404, len(body), "true"))
    status, _, _ = get(conns[0], "/raw/zarr.json", method="HEAD")
    sent.append(("HEAD", "/raw/zarr.json", 200, 0, "true"))
    assert server.stop() == 0
    log = server.log_text()
    # Every line is out at a clean stop, before the stop's own line.
    assert sorted(access_lines(log)) == sorted(sent)
    assert log.rindex("serve::access") < log.index("stopped serving")

    quiet = serve_factory(fixtures_dir, ["--view", "raw"],
                          env={"RUST_LOG": "zarr_mount=info,zarr_mount::serve::access=off"})
    assert get(quiet.connection(), "/raw/zarr.json")[0] == 200
    assert quiet.stop() == 0
    assert access_lines(quiet.log_text()) == [] and "stopped serving" in quiet.log_text()


def wait_for_line(server: Server, text: str, timeout: float = 30) -> None:
    """Until `text` is in the server's log (it polls the file: the log is the event)."""
    deadline = time.monotonic() + timeout
    while text not in server.log_text():
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{server.log_text()}"
        time.sleep(0.01)


def test_a_response_in_flight_at_sigterm_is_finished(serve_factory, tmp_path):
    # One 32 MiB chunk file: far more than the sockets hold, so the response is still being
    # sent when the signal comes.
    data = np.random.default_rng(5).integers(0, 2**16, (4096, 4096), dtype="uint16")
    import zarr
    a = zarr.create_array(tmp_path / "big.zarr" / "a", shape=data.shape, chunks=data.shape,
                          dtype="uint16", compressors=None)
    a[...] = data
    want = (tmp_path / "big.zarr" / "a" / "c" / "0" / "0").read_bytes()
    server = serve_factory(tmp_path / "big.zarr", ["--view", "raw", "--http-threads", "3"])
    conn = server.connection()
    conn.request("GET", "/raw/a/c/0/0")
    r = conn.getresponse()
    assert r.status == 200 and int(r.getheader("content-length")) == len(want)
    got = r.read(1 << 16)
    server.proc.send_signal(signal.SIGTERM)
    wait_for_line(server, "stopping: no new connections")
    got += r.read()
    assert got == want
    assert server.proc.wait(timeout=30) == 0
    wait_for_line(server, "stopped serving")


def test_tokens(serve_factory, fixtures_dir, tmp_path):
    token = tmp_path / "token"
    token.write_text("sesame\n")
    server = serve_factory(fixtures_dir, ["--token-file", str(token), "--view", "raw"])
    conn = server.connection()
    status, h, _ = get(conn, "/raw/zarr.json")
    assert status == 401 and h["www-authenticate"] == "Bearer"
    assert get(conn, "/raw/zarr.json", {"Authorization": "Bearer wrong"})[0] == 401
    assert get(conn, "/raw/zarr.json", {"Authorization": "Bearer sesame"})[0] == 200
    # Only the views asked for.
    assert get(conn, "/v2/", {"Authorization": "Bearer sesame"})[0] == 404


def test_cors(serve_factory, fixtures_dir):
    server = serve_factory(fixtures_dir, ["--cors-origin", "https://viewer.example", "--view", "v2"])
    conn = server.connection()
    origin = {"Origin": "https://viewer.example"}
    status, h, _ = get(conn, "/v2/.zgroup", origin)
    assert status == 200 and h["access-control-allow-origin"] == "https://viewer.example"
    assert "Content-Range" in h["access-control-expose-headers"]
    status, h, _ = get(conn, "/v2/.zgroup", {**origin, "Access-Control-Request-Method": "GET",
                                            "Access-Control-Request-Headers": "range"}, method="OPTIONS")
    assert status == 204 and "Range" in h["access-control-allow-headers"]
    status, h, _ = get(conn, "/v2/.zgroup", {"Origin": "https://evil.example"})
    assert status == 200 and "access-control-allow-origin" not in h


def test_a_corrupt_shard_is_5xx_on_its_chunks_only(serve_factory, store_copy, manifest):
    import json as _json

    sharded = None
    for entry in manifest["arrays"]:
        path = entry["path"] if isinstance(entry, dict) else entry
        meta = _json.loads((store_copy / path / "zarr.json").read_text())
        codecs = meta.get("codecs", [])
        if codecs and codecs[0].get("name") == "sharding_indexed" and meta["chunk_key_encoding"]["name"] == "default":
            shards = sorted(p for p in (store_copy / path / "c").rglob("*") if p.is_file())
            if len(shards) >= 2:
                sharded = (path, shards)
                break
    assert sharded, "the fixtures have a sharded array of two shards or more"
    path, shards = sharded
    bad, good = shards[0], shards[1]
    data = bytearray(bad.read_bytes())
    # The shard index (at the end by default): garbage offsets.
    data[-16:] = b"\xff" * 16
    bad.write_bytes(bytes(data))
    server = serve_factory(store_copy, ["--view", "unsharded"])
    conn = server.connection()
    rel_bad = bad.relative_to(store_copy / path / "c").parts
    rel_good = good.relative_to(store_copy / path / "c").parts
    # An inner chunk of the corrupt shard: its first coordinate per dimension (shard * chunks).
    entries_bad = listing(conn, url_path("unsharded", *path.split("/"), "c") + "/")
    assert entries_bad
    statuses_bad, statuses_good = [], []
    meta = _json.loads((store_copy / path / "zarr.json").read_text())
    inner = meta["codecs"][0]["configuration"]["chunk_shape"]
    outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    per = [o // i for o, i in zip(outer, inner)]
    for rel, out in [(rel_bad, statuses_bad), (rel_good, statuses_good)]:
        coords = [int(c) * p for c, p in zip(rel, per)]
        status, _, body = get(conn, url_path("unsharded", *path.split("/"), "c", *map(str, coords)))
        out.append(status)
    assert statuses_bad[0] >= 500, (statuses_bad, server.log_text())
    assert statuses_good[0] == 200, statuses_good


def test_python_serve_yields_the_base_url(fixtures_dir, zarr_mount_bin, monkeypatch):
    import importlib.util
    import urllib.error
    import urllib.request

    from zm_harness import REPO

    spec = importlib.util.spec_from_file_location("zarr_mount_src", REPO / "python" / "zarr_mount" / "__init__.py")
    zm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zm)
    monkeypatch.setenv("ZARR_MOUNT_BIN", str(BIN))
    with zm.serve(fixtures_dir, view="v2") as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "v2/.zgroup") as r:
            assert r.status == 200 and b"zarr_format" in r.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "raw/zarr.json")
        assert e.value.code == 404
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "v2/.zgroup", timeout=5)
    with pytest.raises(zm.MountError) as e:
        with zm.serve(fixtures_dir, listen="0.0.0.0:0"):
            pass
    assert e.value.returncode == 2 and "--token-file" in str(e.value)


def test_a_backend_outage_is_5xx_never_404_and_recovers(serve_factory, moto, fixtures_dir):
    moto.upload(fixtures_dir, "fx")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    # Nothing kept: every request asks the store.
    args = moto.mount_args() + ["--view", "raw", "--metadata-ttl", "0", "--cache-size", "0"]
    server = serve_factory(moto.url("fx"), args, env=env)
    chunk = next(p for p in sorted((fixtures_dir / "zp").rglob("c/*")) if p.is_file())
    rel = chunk.relative_to(fixtures_dir).parts
    conn = server.connection()
    conn.timeout = 120
    assert get(conn, url_path("raw", *rel))[2] == chunk.read_bytes()
    moto.stop()
    for path in [url_path("raw", *rel), "/raw/zarr.json", "/raw/zp/"]:
        status, _, body = get(conn, path)
        assert 500 <= status < 600, (path, status, body)
        assert body.count(b"\n") == 1, body
    assert server.proc.poll() is None
    assert "request failed" in server.log_text()
    moto.start()
    moto.upload(fixtures_dir, "fx")
    status, _, body = get(conn, url_path("raw", *rel))
    assert (status, body) == (200, chunk.read_bytes())


@pytest.mark.parametrize("view,driver", [("v2", "zarr"), ("unsharded", "zarr3")])
def test_tensorstore_reads_over_http(fixture_server, fixtures_dir, manifest, view, driver):
    import tensorstore as ts

    paths = [a["path"] for a in manifest["arrays"]
             if a.get("tensorstore_readable") and not a["path"].startswith("v2/")
             and a["path"].startswith("ts/")]
    assert paths
    for path in paths:
        spec = {"driver": driver, "kvstore": f"{fixture_server.url}{view}/{path}/", "open": True}
        got = ts.open(spec).result().read().result()
        assert_same_array(got, zp_read(fixtures_dir, path), f"tensorstore {view}/{path}")
