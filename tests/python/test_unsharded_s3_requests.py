"""The unsharded (default) view of a sharded array on S3 (moto), read by zarr-python, costs the
requests zarr-python's own S3 store would send: each shard fetched once (not its index first
and the shard after), and a walk of the array's chunk files with `stat` (what `find`, `ls -R`
or `du` do) reads shard indexes only, never the data, even after a chunk read has shown that
the shards are small. zarr-python 2, which asks for one chunk file at a time, reading through
the v2 view sends one GET per shard too (the shards after the one it reads are fetched ahead)."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from collections import Counter

import numpy as np
import zarr

from zm_s3 import BUCKET, DAEMON_ENV, MotoServer, free_port  # `moto`: conftest.py

SHAPE, SHARDS, CHUNKS = (1024, 1024), (512, 512), (128, 128)  # four shards of 16 chunks


def received_bytes(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.startswith("zarr_mount_backend_received_bytes_total"))


def gets_since(moto: MotoServer, start: int) -> Counter:
    return Counter(re.findall(rf'"GET /{BUCKET}/arr\.zarr/(\S+) HTTP', moto.log_since(start)))


def upload_sharded(moto: MotoServer, tmp_path, shape, seed):
    """A float32 array of `shape` written by zarr-python with CHUNKS in SHARDS, uploaded to
    arr.zarr: its values and its shard keys (relative to the array)."""
    local = tmp_path / "arr.zarr"
    expected = np.random.default_rng(seed).standard_normal(shape, dtype="float32")
    zarr.create_array(str(local), shape=shape, chunks=CHUNKS, shards=SHARDS, dtype="float32",
                      compressors=zarr.codecs.ZstdCodec(level=1))[:] = expected
    moto.upload(local, "arr.zarr")
    shards = sorted(str(p.relative_to(local)) for p in (local / "c").rglob("*") if p.is_file())
    return expected, shards


def test_zarr_python_reads_each_shard_once_and_a_walk_reads_no_data(moto, mount_factory, tmp_path):
    expected, shards = upload_sharded(moto, tmp_path, SHAPE, seed=14)
    assert len(shards) == 4

    def mount():
        port = free_port()
        m = mount_factory(moto.url("arr.zarr"), view="unsharded", read_only=True, env=DAEMON_ENV,
                          extra_args=[*moto.mount_args(), "--metrics-addr", f"127.0.0.1:{port}"])
        return m, port

    start = moto.log_size()
    m, _ = mount()
    np.testing.assert_array_equal(zarr.open_array(str(m.path), mode="r")[:], expected)
    gets = gets_since(moto, start)
    assert {s: gets[s] for s in shards} == {s: 1 for s in shards}, gets
    assert gets["zarr.json"] == 1, gets
    assert m.stop() == []

    # A fresh mount: one chunk read (its shard is then known to be small), then a walk.
    m, port = mount()
    assert (m.path / "c" / "0" / "0").stat().st_size > 0
    (m.path / "c" / "0" / "0").read_bytes()
    before = received_bytes(port)
    files = [os.path.join(d, f) for d, _, fs in os.walk(m.path / "c") for f in fs]
    assert len(files) == 64
    total = sum(os.stat(f).st_size for f in files)
    walked = received_bytes(port) - before
    # Three shard indexes of 16 entries (16 bytes each, and a crc32c): well under 1 KiB each.
    assert walked < 4096, f"the walk received {walked} bytes of {total} bytes of chunks"
    assert m.stop() == []


# zarr-python 2 (its own venv): read the array at argv[1] whole, print its sum.
ZARR2_SUM = "import sys, zarr; print(zarr.open_array(sys.argv[1], mode='r')[:].sum(dtype='float64'))"


def test_zarr_python_2_through_the_v2_view_sends_one_get_per_shard(moto, mount_factory, tmp_path, zarr2_python):
    # A row of 8 shards: a C-order scan one chunk at a time walks into each one after the other.
    expected, shards = upload_sharded(moto, tmp_path, (SHARDS[0], SHARDS[1] * 8), seed=15)
    assert len(shards) == 8

    start = moto.log_size()
    m = mount_factory(moto.url("arr.zarr"), view="v2", read_only=True, env=DAEMON_ENV,
                      extra_args=moto.mount_args())
    out = subprocess.run([str(zarr2_python), "-c", ZARR2_SUM, str(m.path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert abs(float(out.stdout) - float(expected.sum(dtype="float64"))) < 1e-2
    gets = gets_since(moto, start)
    assert {s: gets[s] for s in shards} == {s: 1 for s in shards}, gets
    assert m.stop() == []
