"""Icechunk virtual chunks in an S3-compatible store (issue 24): a repository written by the
`icechunk` Python package whose chunks are byte ranges of a NetCDF4 file in a local moto server,
through a virtual chunk container with a custom endpoint (what a MinIO or on-premises user
writes). Through the mount, every chunk file is the referenced bytes, read with exactly one
ranged GET of the NetCDF (never a GET of the whole file, no HEAD), and the arrays equal what
netCDF4 and icechunk read. Bad input: a chunk past the end of the file and a container nobody
listens on are EIO with a log line; a stopped server is EIO, and reads work again once it is
back; the mount stays up throughout."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import REPO

ic = pytest.importorskip("icechunk")
netCDF4 = pytest.importorskip("netCDF4")

from zm_s3 import ACCESS_KEY, BUCKET, DAEMON_ENV, SECRET_KEY, MotoServer, free_port  # noqa: E402

VARS = ("temp", "big")


def make_fixture(out: Path, server: MotoServer) -> dict:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_icechunk_fixtures.py"), str(out),
                          "--s3", server.endpoint, "--dead-endpoint", dead], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"gen_icechunk_fixtures.py --s3 failed:\n{res.stdout}\n{res.stderr}")
    info = json.loads((out / "s3" / "info.json").read_text())
    assert info["bucket"] == BUCKET
    return info


def upload(server: MotoServer, out: Path, info: dict) -> bytes:
    nc = (out / "s3" / "source.nc").read_bytes()
    server.client().put_object(Bucket=BUCKET, Key=info["nc_key"], Body=nc)
    return nc


def moto_requests(server: MotoServer, start: int, key: str) -> list[tuple[str, str]]:
    """(method, status) of each request moto logged on `key` after byte `start` of its log
    (werkzeug: `127.0.0.1 - - [date] "GET /bkt/nc/source.nc HTTP/1.1" 206 -`)."""
    out = []
    for m in re.finditer(r'"(\w+) (\S+) HTTP/[\d.]+" (\d{3})', server.log_since(start)):
        path = m.group(2).split("?")[0]
        if path == f"/{BUCKET}/{key}":
            out.append((m.group(1), m.group(3)))
    return out


def icechunk_arrays(repo: Path, info: dict) -> dict[str, np.ndarray]:
    """What zarr-python reads through icechunk itself (from the same moto)."""
    creds = ic.s3_static_credentials(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    r = ic.Repository.open(ic.local_filesystem_storage(str(repo)),
                           authorize_virtual_chunk_access=ic.containers_credentials(
                               {info["containers"][0]: creds}))
    group = zarr.open_group(r.readonly_session(branch="main").store, mode="r")
    return {v: group[v][...] for v in VARS}


def read_every_chunk(m, moto: MotoServer, info: dict, nc: bytes) -> Counter:
    """Read every virtual chunk file through mount `m`: each is its referenced bytes. Returns
    the requests moto received for the NetCDF meanwhile, as {"METHOD status": count}."""
    mark = moto.log_size()
    for key, (offset, length) in sorted(info["chunks"].items()):
        got = (m.path / key).read_bytes()
        assert len(got) == length, key
        assert got == nc[offset:offset + length], f"{key}: not the referenced bytes"
    counts = Counter(f"{method} {status}" for method, status in moto_requests(moto, mark, info["nc_key"]))
    print(f"{len(info['chunks'])} chunk files read; requests on the NetCDF: {dict(counts)}")
    return counts


@pytest.mark.mount
def test_each_virtual_chunk_read_is_one_ranged_get(moto, tmp_path, mount_factory):
    info = make_fixture(tmp_path / "fx", moto)
    nc = upload(moto, tmp_path / "fx", info)
    repo = tmp_path / "fx" / "s3" / "repo"
    want = icechunk_arrays(repo, info)
    with netCDF4.Dataset(tmp_path / "fx" / "s3" / "source.nc") as ds:
        native = {v: ds[v][...].data for v in VARS}
    # One GET answered 206 (moto honoured a Range header) per chunk file; a GET of the whole
    # file would be a 200; no HEAD. The 128 KiB chunks take several FUSE reads each.
    one_each = Counter({"GET 206": len(info["chunks"])})

    # A local repository: the container's custom endpoint is not the mount's, so it must be
    # authorized. Its endpoint and addressing come from the repository, credentials from AWS_*.
    m = mount_factory(f"icechunk+file://{repo}", view="raw", env=DAEMON_ENV,
                      extra_args=["--authorize-virtual", info["containers"][0]])
    assert read_every_chunk(m, moto, info, nc) == one_each
    # zarr-python through the mount equals netCDF4 reading the file, and icechunk reading the
    # repository (the chunks come from the caches now).
    group = zarr.open_group(str(m.path), mode="r", zarr_format=3)
    for v in VARS:
        got = group[v][...]
        assert got.dtype == native[v].dtype, v
        np.testing.assert_array_equal(got, native[v], err_msg=v)
        np.testing.assert_array_equal(got, want[v], err_msg=v)
    # The other container (another endpoint) was not authorized: EIO, and the log says why.
    with pytest.raises(OSError) as e:
        (m.path / "unreachable/c/0/0").read_bytes()
    assert e.value.errno == errno.EIO
    assert f"--authorize-virtual {info['containers'][1]}" in m.log_text(tail=None)
    m.check_alive()

    # The same repository in the same S3 server, mounted with --endpoint-url: a container on
    # the mount's own endpoint needs no --authorize-virtual.
    c = moto.client()
    for f in sorted(repo.rglob("*")):
        if f.is_file():
            c.put_object(Bucket=BUCKET, Key=f"repos/v/{f.relative_to(repo)}", Body=f.read_bytes())
    s = mount_factory(f"icechunk+{moto.url('repos/v')}", view="raw", env=DAEMON_ENV,
                      extra_args=moto.mount_args())
    assert read_every_chunk(s, moto, info, nc) == one_each
    s.check_alive()


@pytest.mark.mount
def test_bad_virtual_chunks_are_eio_and_the_mount_recovers(moto, tmp_path, mount_factory):
    info = make_fixture(tmp_path / "fx", moto)
    nc = upload(moto, tmp_path / "fx", info)
    repo = tmp_path / "fx" / "s3" / "repo"
    m = mount_factory(f"icechunk+file://{repo}", view="raw", env=DAEMON_ENV,
                      extra_args=["--authorize-virtual", "all"])

    def eio(rel: str, why: str) -> None:
        with pytest.raises(OSError) as e:
            (m.path / rel).read_bytes()
        assert e.value.errno == errno.EIO, rel
        lines = [line for line in m.log_text(tail=None).splitlines() if f'"{rel}"' in line]
        assert any(why in line for line in lines), f"no log line for {rel} saying {why!r}: {lines}"

    t0 = time.monotonic()
    eio("past_end/c/0/0", "not enough data")  # 512 bytes from 100 bytes before the end
    eio("unreachable/c/0/0", f"/gone/{info['nc_key']}")  # nothing listens on that endpoint
    # The rest of the repository is unaffected.
    offset, length = info["chunks"]["temp/c/0/0"]
    assert (m.path / "temp/c/0/0").read_bytes() == nc[offset:offset + length]

    # The server goes away: EIO, the mount stays up. It comes back (moto starts empty: the
    # file is uploaded again) and the same file reads.
    moto.stop()
    eio("temp/c/1/0", f"{moto.endpoint}/{BUCKET}/{info['nc_key']}")
    m.check_alive()
    print(f"three EIOs in {time.monotonic() - t0:.1f} s")
    moto.start()
    upload(moto, tmp_path / "fx", info)
    offset, length = info["chunks"]["temp/c/1/0"]
    assert (m.path / "temp/c/1/0").read_bytes() == nc[offset:offset + length]
    m.check_alive()
