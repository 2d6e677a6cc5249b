"""--cache-dir with zarr-python on S3 (issue 21): a sharded array written by zarr-python, read
through a read-only raw mount of a local moto server twice. The first mount fills the disk
cache; the second reads every shard from its copy in the cache, handed to the kernel at open
(FUSE passthrough) where the kernel allows it, and sends no GET. Whole reads and partial
selections (which read a shard's index and some inner chunks by range) equal what was written."""

from __future__ import annotations

import os
import platform
import re
import urllib.request

import numpy as np
import pytest
import zarr

from zm_s3 import BUCKET, DAEMON_ENV, MotoServer, free_port  # `moto`: conftest.py

SHAPE, SHARDS, CHUNKS = (2048, 1536), (1024, 512), (256, 256)  # six 2 MiB shards


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def shard_gets(moto: MotoServer, start: int) -> list[str]:
    return re.findall(rf'"GET (/{BUCKET}/arr\.zarr/c/\S+) HTTP', moto.log_since(start))


def test_a_warm_cache_serves_zarr_python_from_copies(moto, mount_factory, tmp_path):
    local = tmp_path / "arr.zarr"
    expected = np.random.default_rng(21).standard_normal(SHAPE, dtype="float32")
    # No compressor: each shard is 2 MiB and more, as large as passthrough needs.
    a = zarr.create_array(str(local), shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="float32",
                          compressors=None)
    a[:] = expected
    moto.upload(local, "arr.zarr")
    cache = tmp_path / "cache"

    def mount():
        port = free_port()
        m = mount_factory(moto.url("arr.zarr"), view="raw", read_only=True, env=DAEMON_ENV,
                          extra_args=[*moto.mount_args(), "--cache-dir", str(cache),
                                      "--metrics-addr", f"127.0.0.1:{port}"])
        return m, port

    def read_all(m):
        arr = zarr.open_array(str(m.path), mode="r")
        np.testing.assert_array_equal(arr[:], expected)
        np.testing.assert_array_equal(arr[100:900, 300:1400], expected[100:900, 300:1400])
        np.testing.assert_array_equal(arr[1500:, 7], expected[1500:, 7])

    cold, _ = mount()
    read_all(cold)
    assert cold.stop() == []
    copies = [p for p in (cache / "copies").rglob("*") if p.is_file()]
    assert len(copies) >= 6, copies  # six shards, and zarr.json

    start = moto.log_size()
    warm, port = mount()
    read_all(warm)
    read_all(warm)
    assert shard_gets(moto, start) == [], "a warm cache sends no GET of a shard"
    # FUSE passthrough needs Linux 6.9 or later and CAP_SYS_ADMIN; elsewhere the copies are
    # read through the daemon (the reads above were exact either way).
    kernel = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
    if kernel >= (6, 9) and os.geteuid() == 0:
        # Each read_all opens every shard it touches; all of those opens are passthrough.
        assert metric(port, "zarr_mount_passthrough_opens_total") >= 12
