"""A chunk file that the mount fetches whole (a shard of up to 8 MiB) is readable as its bytes
arrive: on a slow connection (moto behind scripts/latency_proxy.py, capped at 1 MB/s per
connection), the first 64 KiB of a 2 MiB shard come back long before the whole transfer, and
every byte read while the rest is still on the wire is the stored byte."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr

from zm_s3 import DAEMON_ENV  # `moto`: conftest.py

PROXY = Path(__file__).resolve().parents[2] / "scripts" / "latency_proxy.py"
MBPS = 1.0  # a 2 MiB shard takes about 2 s to arrive


def test_the_first_bytes_of_a_shard_are_read_before_the_rest_arrives(moto, mount_factory, tmp_path):
    local = tmp_path / "arr.zarr"
    expected = np.random.default_rng(21).standard_normal((1024, 512), dtype="float32")  # 2 MiB
    zarr.create_array(str(local), shape=expected.shape, chunks=(128, 128), shards=(1024, 512),
                      dtype="float32", compressors=None)[:] = expected
    moto.upload(local, "arr.zarr")
    stored = (local / "c" / "0" / "0").read_bytes()
    assert len(stored) > 2 << 20

    proxy = subprocess.Popen([sys.executable, str(PROXY), "--target", str(moto.port), "--delay-ms", "20",
                              "--conn-mbps", str(MBPS)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proxy.stdout.readline().split()[1])
        m = mount_factory(moto.url("arr.zarr"), view="raw", read_only=True, env=DAEMON_ENV,
                          extra_args=["--endpoint-url", f"http://127.0.0.1:{port}", "--array-prefetch", "0"])
        assert (m.path / "zarr.json").read_bytes()
        t0 = time.monotonic()
        with open(m.path / "c" / "0" / "0", "rb") as f:
            head = f.read(64 << 10)
            t_head = time.monotonic() - t0
            rest = f.read()
        t_all = time.monotonic() - t0
        assert head + rest == stored
        transfer = len(stored) / (MBPS * 1e6)
        assert t_all >= 0.8 * transfer, (t_all, transfer)
        # The proxy's pacing makes the whole shard take at least 0.8 * transfer (2.1 s) to
        # arrive, however fast the machine: a first READ that waited for all of it (as before
        # streamed fetches) cannot return sooner, while a streamed one returns in a fraction of
        # that, also on a loaded machine.
        assert t_head < 0.8 * transfer, f"first 64 KiB after {t_head:.3f} s of {t_all:.3f} s"
        # Through zarr-python, exact.
        np.testing.assert_array_equal(zarr.open_array(str(m.path), mode="r")[:], expected)
        assert m.stop() == []
    finally:
        proxy.terminate()
        proxy.wait(10)
